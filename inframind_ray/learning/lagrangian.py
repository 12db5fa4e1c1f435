"""The constrained objective: maximise quality s.t. mean lateness cost <= delta and, optionally,
accuracy >= S0 (LAMaS's accuracy floor).

A learner-connector piece (first in the learner pipeline, so GAE sees its rewards) rewrites every
agent's terminal reward from the env's infos as ``quality - baseline - lam * cost * weight -
toll + mu * correct`` (quality first: a correct, in-budget answer is worth 1; LAMaS credit:
``weight = l(o) / T``; ``baseline`` is the env's optional per-item counterfactual baseline,
``toll`` its optional congestion toll, else 0; ``correct`` is 1 for a right answer however late),
all over ``1 + mu`` so that the returns stay on the value head's scale while mu grows (the same
optimum; without a floor mu is 0 and nothing is scaled).
The Learner, a PPO learner subclass, owns both multipliers and updates them by projected dual
ascent after each gradient-based update, over the batch's queries: ``lam <- max(0, lam + eta *
(mean_cost - delta))`` and, when a floor ``S0`` is set, ``mu <- max(0, mu + eta_mu * (S0 -
mean_accuracy))``; both are logged under ``lagrangian/*`` every iteration and kept in the
learner's state (checkpoints, resume).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.ppo import LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.torch_utils import explained_variance

from inframind_ray.learning.decoupled import PROX_LOGP, ProximalLogp, decoupled_batch
from inframind_ray.learning.modules import PLANNER


def dual_ascent(lam: float, mean_cost: float, delta: float, lr: float,
                lam_max: float = 100.0) -> float:
    """One projected dual-ascent step on the Lagrange multiplier."""
    return float(min(lam_max, max(0.0, lam + lr * (mean_cost - delta))))


class LagrangianReward(ConnectorV2):
    """Terminal reward = (quality - baseline - lam * cost * weight - toll + mu * correct) / (1 +
    mu) (the agent's final infos)."""

    def __init__(self, input_observation_space=None, input_action_space=None, *,
                 lam: float = 0.0, mu: float = 0.0, **kwargs: Any) -> None:
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.lam = lam
        self.mu = mu  # the accuracy floor's multiplier (0 without a floor)
        self.query_costs: list[float] = []  # one per query (from its planner agent)
        self.query_quality: list[float] = []
        self.query_correct: list[float] = []

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 **kwargs: Any):
        costs, quality, correct = [], [], []
        for sa in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            if len(sa) == 0:
                continue
            info = sa.get_infos(-1)
            if not isinstance(info, dict) or "cost" not in info:
                continue
            reward = (info["quality"] - info.get("baseline", 0.0)
                      - self.lam * info["cost"] * info["weight"] - info.get("toll", 0.0)
                      + self.mu * info.get("correct", 0.0)) / (1.0 + self.mu)
            sa.set_rewards(new_data=np.float32(reward), at_indices=-1)
            if sa.module_id == PLANNER or str(sa.agent_id).startswith("plan/"):
                costs.append(float(info["cost"]))
                quality.append(float(info["quality"]))
                correct.append(float(info.get("correct", 0.0)))
        self.query_costs, self.query_quality, self.query_correct = costs, quality, correct
        return batch


class LagrangianPPOLearner(PPOTorchLearner):
    """PPO learner holding the Lagrange multiplier of the latency constraint.

    Settings come from ``config.learner_config_dict``: ``lam_init``, ``lam_lr`` (eta),
    ``cost_target`` (delta) and ``lam_max``; for the accuracy floor ``accuracy_floor`` (S0, None:
    no floor), ``mu_init``, ``mu_lr`` and ``mu_max``.
    """

    def build(self) -> None:
        """Build PPO's learner and wire the reward piece to this learner's lambda."""
        super().build()
        cfg = self.config.learner_config_dict or {}
        self.lam = float(cfg.get("lam_init", 1.0))
        self.lam_lr = float(cfg.get("lam_lr", 0.5))
        self.cost_target = float(cfg.get("cost_target", 0.01))
        self.lam_max = float(cfg.get("lam_max", 100.0))
        floor = cfg.get("accuracy_floor")
        self.accuracy_floor = None if floor is None else float(floor)
        self.mu = float(cfg.get("mu_init", 0.0)) if floor is not None else 0.0
        self.mu_lr = float(cfg.get("mu_lr", 2.0))
        self.mu_max = float(cfg.get("mu_max", 20.0))
        pieces = [c for c in self._learner_connector.connectors
                  if isinstance(c, LagrangianReward)] if self._learner_connector else []
        if not pieces:
            raise ValueError("LagrangianPPOLearner needs the LagrangianReward learner connector")
        self.reward_piece = pieces[0]
        self.reward_piece.lam, self.reward_piece.mu = self.lam, self.mu
        self.decoupled = bool(cfg.get("decoupled", False))
        if self.decoupled:  # PPO's decoupled objective (learning/decoupled.py), after GAE
            self._learner_connector.append(ProximalLogp())

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        """RLlib's default optimizer (Adam, the learning rate from ``config.lr``), fused: one
        kernel over all parameters instead of a Python loop per tensor, the same update
        (docs/learning.md, "Training throughput")."""
        params = self.get_parameters(self._module[module_id])
        self.register_optimizer(module_id=module_id, optimizer=torch.optim.Adam(params, fused=True),
                                params=params, lr_or_lr_schedule=config.lr)

    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict,
                                fwd_out: dict) -> Any:
        """PPO's loss; also logs two CleanRL diagnostics RLlib does not: the clip fraction (share
        of decisions whose probability ratio left [1 - clip, 1 + clip]) and the approximate KL
        to the sampling policy, ``mean((ratio - 1) - log ratio)`` (RLlib's ``mean_kl_loss`` is
        0 unless its KL loss is on). With ``decoupled`` (learning/decoupled.py) the ratio, its
        clip and both diagnostics are taken against the proximal policy, and the importance
        weights of the lag are logged (``lag_weight_mean``, ``lag_weight_max``)."""
        w = None
        if self.decoupled and PROX_LOGP in batch:
            batch, w = decoupled_batch(batch)
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch,
                                               fwd_out=fwd_out)
        with torch.no_grad():
            dist = self.module[module_id].get_train_action_dist_cls().from_logits(
                fwd_out[Columns.ACTION_DIST_INPUTS])
            log_ratio = dist.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP]
            ratio = torch.exp(log_ratio)
            clipped = ((ratio - 1.0).abs() > config.clip_param).float()
            kl = (ratio - 1.0) - log_ratio
            mask = batch.get(Columns.LOSS_MASK)
            value, target = fwd_out[Columns.EMBEDDINGS], batch[Postprocessing.VALUE_TARGETS]
            if mask is not None and mask.any():
                clipped, kl = clipped[mask], kl[mask]
                value, target = value[mask], target[mask]
                w = None if w is None else w[mask]
        if w is not None:
            self.metrics.log_value((module_id, "lag_weight_mean"), float(w.mean()), window=1)
            self.metrics.log_value((module_id, "lag_weight_max"), float(w.max()), window=1)
        self.metrics.log_value((module_id, "clip_fraction"), float(clipped.mean()), window=1)
        self.metrics.log_value((module_id, "approx_kl"), float(kl.mean()), window=1)
        # RLlib's explained variance counts the bootstrap rows too (LOSS_MASK False: no value
        # computed for them, ``modules.py``); this one, logged over it, counts the loss's rows
        self.metrics.log_value((module_id, LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY),
                               float(explained_variance(target, value)), window=1)
        return loss

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        """PPO's bookkeeping, then one dual-ascent step on the batch's mean query cost."""
        super().after_gradient_based_update(timesteps=timesteps)
        costs = self.reward_piece.query_costs
        if costs:
            mean_cost = float(np.mean(costs))
            self.lam = dual_ascent(self.lam, mean_cost, self.cost_target, self.lam_lr,
                                   self.lam_max)
            self.reward_piece.lam = self.lam
            self.metrics.log_value(("lagrangian", "mean_cost"), mean_cost, window=1)
            self.metrics.log_value(("lagrangian", "goodput"),
                                   float(np.mean(self.reward_piece.query_quality)), window=1)
            accuracy = float(np.mean(self.reward_piece.query_correct))
            self.metrics.log_value(("lagrangian", "accuracy"), accuracy, window=1)
            if self.accuracy_floor is not None:
                self.mu = dual_ascent(self.mu, self.accuracy_floor, accuracy, self.mu_lr,
                                      self.mu_max)  # rises while accuracy < S0
                self.reward_piece.mu = self.mu
        self.metrics.log_value(("lagrangian", "lambda"), self.lam, window=1)
        self.metrics.log_value(("lagrangian", "mu"), self.mu, window=1)

    def get_state(self, *args: Any, **kwargs: Any) -> dict:
        """Learner state plus lambda."""
        state = super().get_state(*args, **kwargs)
        state["lagrangian_lambda"] = self.lam
        state["lagrangian_mu"] = self.mu
        return state

    def set_state(self, state: dict) -> None:
        """Restore the learner state and lambda."""
        super().set_state(state)
        if "lagrangian_lambda" in state:
            self.lam = float(state["lagrangian_lambda"])
            self.reward_piece.lam = self.lam
        if "lagrangian_mu" in state:
            self.mu = float(state["lagrangian_mu"])
            self.reward_piece.mu = self.mu
