"""Pools: the shipped pool files (YAML), each model's hardware facts and its model card."""
