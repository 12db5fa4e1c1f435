"""Errors users see: one clear line, a field name where there is one, exit code 2 at the CLI."""

from __future__ import annotations


class InframindError(Exception):
    """Base of every error the CLI turns into one line and exit code 2."""

    exit_code = 2


class ConfigError(InframindError):
    """A configuration value is invalid; ``field`` names it (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self):
        return (type(self), (self.field, self.message))
