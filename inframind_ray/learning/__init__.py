"""Learning plane: the RLlib multi-agent environment over the twin (training comes next)."""
