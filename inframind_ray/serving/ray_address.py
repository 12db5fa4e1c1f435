"""Join a running Ray cluster or fail in one line: a quick reachability check before `ray.init`.

`ray.init(address="HOST:PORT")` with nothing listening retries the GCS for minutes before it
raises; an operator who mistyped a port should hear so at once. Used by the serving plane
(`inframind serve --address`) and the learner (`inframind learn --address`).
"""

from __future__ import annotations

import socket

from inframind_ray.errors import InframindError

REACH_TIMEOUT_S = 5.0
"""How long a TCP connect to the cluster's address may take before it is called unreachable."""

_NAMED = {"auto", "local"}
"""Addresses Ray resolves itself: it fails fast on these when no cluster is found."""


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for ``auto``
    and ``local``. Raises InframindError for anything else."""
    a = address.strip()
    if a in _NAMED:
        return None
    body = a.removeprefix("ray://")
    host, sep, port = body.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InframindError(f"cannot join the Ray cluster at {address!r}: expected 'auto', "
                             "HOST:PORT or ray://HOST:PORT")
    return host, int(port)


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise InframindError in one line if nothing accepts a TCP connection at ``address``
    within ``timeout_s`` (``auto`` and ``local`` are left to Ray)."""
    hp = host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            pass
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise InframindError(f"cannot join the Ray cluster at {address}: nothing answers at "
                             f"{hp[0]}:{hp[1]} ({why.lower()} after at most {timeout_s:g} s)"
                             ) from None


def join(address: str, **init_kwargs: object) -> None:
    """``ray.init(address=address, **init_kwargs)`` after ``check_reachable``; a Ray that still
    cannot connect (``auto`` with no cluster on this node) becomes one InframindError line."""
    import ray

    check_reachable(address)
    try:
        ray.init(address=address, **init_kwargs)
    except ConnectionError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InframindError(f"cannot join the Ray cluster at {address}: {first}") from None
