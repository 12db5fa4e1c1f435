"""RLlib RLModules (new API stack) around the policy's own networks.

``planner`` and ``executor`` are two modules of one MultiRLModule; agents map to them by id
prefix (``plan/...`` and ``step/...``, see :func:`module_of`). Observations are the env's Dict
spaces (features plus an action mask); masked actions get -1e9 logits in every forward pass, so
exploration never samples an unavailable model. The value heads serve PPO's GAE.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule

from inframind_ray.policy.learned import (
    EXECUTOR_KEYS,
    PLANNER_KEYS,
    ExecutorNet,
    PlannerNet,
    used_rows,
)

PLANNER, EXECUTOR = "planner", "executor"


def module_of(agent_id: str, *args: Any, **kwargs: Any) -> str:
    """policy_mapping_fn: ``plan/<n>`` -> planner, ``step/<n>/<node>`` -> executor."""
    return PLANNER if agent_id.startswith("plan/") else EXECUTOR


class PlannerModule(TorchRLModule, ValueFunctionAPI):
    """PlannerNet: pooled model rows + FiLM(query embedding | globals) -> (topology, K) logits,
    and a value. The spaces have fixed shapes (MAX_MODELS rows), whatever the pool."""

    keys = PLANNER_KEYS
    packs = False  # the learner's passes encode only valid model rows (ExecutorNet's packed)

    def setup(self) -> None:
        """Build the net (its shapes are the features' constants, not the pool's)."""
        self.net = PlannerNet(int(self.model_config.get("hidden", 128)))

    def _run(self, batch: dict, learner: bool = False) -> tuple:
        """The net on the batch's rows in use; the learner's passes (minibatches of hundreds of
        decisions from pools of 1-8 models) packed where the net supports it (the same
        logits and values; measured in docs/learning.md, "Training throughput")."""
        o = batch[Columns.OBS]
        extra = {"packed": True} if learner and self.packs else {}
        return self.net(*(o[k] for k in self.keys), n_rows=used_rows(o["row_mask"]), **extra)

    def _forward(self, batch: dict, **kwargs: Any) -> dict:
        logits, _ = self._run(batch)
        return {Columns.ACTION_DIST_INPUTS: logits}

    def _forward_train(self, batch: dict, **kwargs: Any) -> dict:
        """The learner's pass on the rows its loss counts. Every decision is a one-step
        episode, and PPO's learner pipeline appends a bootstrap step to each (RLlib's
        ``AddOneTsToEpisodesAndTruncate``, ``LOSS_MASK`` False): half of every minibatch.
        Those rows get constant outputs (logits and value 0) instead of a forward and
        backward pass; the loss, a masked mean, and its gradients are the same."""
        mask = batch.get(Columns.LOSS_MASK)
        if mask is None or bool(mask.all()):
            logits, value = self._run(batch, learner=True)
        else:
            keep = mask.nonzero(as_tuple=True)
            obs = {k: v[keep] for k, v in batch[Columns.OBS].items()}
            lo, va = self._run({Columns.OBS: obs}, learner=True)
            logits = lo.new_zeros((mask.shape[0], lo.shape[1])).index_put(keep, lo)
            value = va.new_zeros(mask.shape[0]).index_put(keep, va)
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: value}

    def compute_values(self, batch: dict, embeddings: Any = None):
        """V(s); reuses the train pass's value when given."""
        if embeddings is not None:
            return embeddings
        return self._run(batch, learner=True)[1]


class ExecutorModule(PlannerModule):
    """ExecutorNet: every (model row, strategy) scored by shared weights, and a value."""

    keys = EXECUTOR_KEYS
    packs = True

    def setup(self) -> None:
        """Build the net (its shapes are the features' constants, not the pool's)."""
        self.net = ExecutorNet(int(self.model_config.get("hidden", 128)))


def module_spec(plan_obs: gym.Space, plan_act: gym.Space, exec_obs: gym.Space,
                exec_act: gym.Space, hidden: int = 128) -> MultiRLModuleSpec:
    """The two-module spec for an env's spaces."""
    cfg = {"hidden": hidden}
    return MultiRLModuleSpec(rl_module_specs={
        PLANNER: RLModuleSpec(module_class=PlannerModule, observation_space=plan_obs,
                              action_space=plan_act, model_config=cfg),
        EXECUTOR: RLModuleSpec(module_class=ExecutorModule, observation_space=exec_obs,
                               action_space=exec_act, model_config=cfg),
    })
