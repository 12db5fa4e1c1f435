"""inframind_ray: infrastructure-aware multi-agent LLM orchestration on Ray."""

__version__ = "0.1.0"
