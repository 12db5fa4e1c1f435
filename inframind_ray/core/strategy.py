"""How deeply an agent reasons."""

from __future__ import annotations

import enum


class Strategy(enum.StrEnum):
    """How deeply an agent reasons. Enforced by prompt AND a model-aware max_tokens."""

    FLASH = "flash"
    CONCISE = "concise"
    DEEPTHINK = "deepthink"
