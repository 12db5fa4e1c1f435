"""Shared fixtures."""

from __future__ import annotations

import pytest

from inframind_ray.config import load_pool


@pytest.fixture(scope="session")
def pool():
    """The `constrained` pool (the default until issue 19, 70B held to 6 slots): the policy-level
    claims of the tests were made on it and rely on its 70B congesting by 300 req/min."""
    return load_pool("constrained")
