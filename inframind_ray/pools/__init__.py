"""Pools: the shipped pool files (YAML), each model's hardware facts (``hardware.py``), what the
recorded answers say about it (``recorded.py``) and its model card (``cards.py``), all without
the simulator."""
