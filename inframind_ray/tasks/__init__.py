"""Task families: items, prompts per strategy and role, answer extraction and grading, and the
workload that draws items of a split. ``mmlu_pro.py`` is the one family today; a new family
implements ``base.TaskFamily`` beside it."""
