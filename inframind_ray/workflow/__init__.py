"""The agent workflow: topologies as DAGs, prompts, and one runner for the twin and Serve."""
