"""Engine contracts shared by the twin and the serving plane: requests, queues, profiles."""
