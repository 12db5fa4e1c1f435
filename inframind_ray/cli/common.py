"""What every plane's commands share: the console and the parsers of list options."""

from __future__ import annotations

import sys

from rich.console import Console

from inframind_ray.errors import ConfigError

console = Console(width=None if sys.stdout.isatty() else 160)


def floats(text: str, field: str) -> tuple[float, ...]:
    """'10,30,50' -> (10.0, 30.0, 50.0); ConfigError naming ``field`` otherwise."""
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise ConfigError(field, "is empty")
    return vals


def budget_range(text: str) -> tuple[float, float]:
    """'MIN,MAX' seconds with 0 < MIN <= MAX; ConfigError naming ``budget`` otherwise."""
    lohi = floats(text, "budget")
    if len(lohi) != 2 or not 0 < lohi[0] <= lohi[1]:
        raise ConfigError("budget", f"expected MIN,MAX with 0 < MIN <= MAX, got {text!r}")
    return lohi[0], lohi[1]


def listed(values: tuple[float, ...] | tuple[str, ...]) -> str:
    """A default list as the option's text: (20.0, 90.0) -> '20,90'."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
