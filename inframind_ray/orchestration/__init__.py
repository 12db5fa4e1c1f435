"""Orchestration: one query's agent DAG run on either clock (the workflow runner)."""
