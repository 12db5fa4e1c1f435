"""Engine implementations behind one protocol (``engines.base.Engine``)."""
