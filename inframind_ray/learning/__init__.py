"""Learning plane: the RLlib multi-agent environment over the twin (``env.py``), the planner and
executor RLModules, the Lagrangian PPO learner, the behaviour-cloning warm start and
``inframind train`` (``train.py``), which produces the shipped ``inframind`` policy."""
