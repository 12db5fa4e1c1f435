"""Task families: items, prompts per strategy and role, answer extraction and grading."""
