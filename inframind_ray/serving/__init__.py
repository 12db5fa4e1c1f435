"""The serving plane on Ray Serve: engines, replica queues, metrics, orchestrator, HTTP API."""
