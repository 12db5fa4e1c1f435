"""Shared fixtures."""

from __future__ import annotations

import pytest

from inframind_ray.config import load_pool


@pytest.fixture(scope="session")
def pool():
    """The shipped default pool."""
    return load_pool("default")
