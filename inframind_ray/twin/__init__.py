"""The digital twin: a discrete-event simulation of a served model pool on a virtual clock."""
