"""Per-episode pools of the RL env: the config's pool, one of a list, or a random pool.

``EnvConfig.pools`` (None, a list of pool names or files, or ``"sampled"``) decides which pool
each sub-simulation's episode runs on; ``pools: sampled`` draws from ``pools.sampler.sample_pool``
(random model subsets, GPUs, replicas, slots). Every pool's observations must fit the env's
spaces: while the policy's features are positional per model, that means pools of the same
model count as the config's pool (a pool that does not fit fails its episode with a one-line
error naming it). ``capacity_rpm`` is the load-factor proxy (assumption
``LOAD_CAPACITY_PROXY``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.types import PoolInfo, TokenBudget
from inframind_ray.errors import ConfigError
from inframind_ray.learning.subsim import SimPool
from inframind_ray.policy.features import FeatureBuilder
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.twin.outcome import OutcomeModel

CACHED_POOLS = 64  # sampled pools whose outcomes and features are kept between episodes


def sim_pool(cfg: PoolConfig, token_budget: TokenBudget) -> SimPool:
    """A pool with its policy view, outcome model and feature builder."""
    info = build_pool_info(cfg)
    return SimPool(cfg, info, OutcomeModel.for_models(cfg.models),
                   FeatureBuilder(info, token_budget))


def capacity_rpm(info: PoolInfo, tasks: dict[str, float]) -> float:
    """Queries/min if each were one DeepThink call of the mix's mean length, decoded at full
    batch on every replica (assumption ``LOAD_CAPACITY_PROXY``)."""
    per_s = 0.0
    for m in info.models:
        tokens = sum(share * m.call_tokens(Strategy.DEEPTHINK, False, task)
                     for task, share in tasks.items()) / sum(tasks.values())
        step = m.profile.iteration_time(0, m.max_num_seqs, 0.0)
        per_s += m.replicas * m.max_num_seqs / max(1e-9, tokens * step)
    return 60.0 * per_s


class PoolSource:
    """Draws each episode's pool (see the module docstring); pools are built once and kept."""

    def __init__(self, default: SimPool, pools: list[str] | str | None, token_budget: TokenBudget,
                 fits: Callable[[SimPool], str | None]) -> None:
        self.default, self.pools, self.token_budget, self.fits = (default, pools, token_budget,
                                                                   fits)
        self._cache: OrderedDict[str, SimPool] = OrderedDict()
        self._sample: Callable[[np.random.Generator], PoolConfig] | None = None
        if pools == "sampled":
            try:
                from inframind_ray.pools.sampler import sample_pool
            except ImportError:
                raise ConfigError("env.pools", "'sampled' needs inframind_ray.pools.sampler "
                                  "(random training pools), which this install lacks") from None
            self._sample = sample_pool
        elif isinstance(pools, list):
            for name in pools:  # load and check every listed pool up front
                self._get(name, lambda name=name: load_pool(name))

    def draw(self, rng: np.random.Generator) -> SimPool:
        """This episode's pool (the default without ``pools``; no draw from ``rng`` then)."""
        if self.pools is None:
            return self.default
        if self._sample is not None:
            cfg = self._sample(rng)
            return self._get(cfg.model_dump_json(), lambda: cfg)
        name = self.pools[int(rng.integers(len(self.pools)))]
        return self._get(name, lambda: load_pool(name))

    def _get(self, key: str, load: Callable[[], PoolConfig]) -> SimPool:
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        pool = sim_pool(load(), self.token_budget)
        why = self.fits(pool)
        if why:
            raise ConfigError("env.pools", f"pool {pool.config.name!r} does not fit the env's "
                              f"observation spaces ({why})")
        self._cache[key] = pool
        if len(self._cache) > CACHED_POOLS:
            self._cache.popitem(last=False)
        return pool
