"""Policies behind one interface: a planner (topology, K, roles), an executor (model, strategy)."""
