"""PPO's decoupled objective for batches sampled by older weights (``ppo.decoupled``).

With ``ppo.overlap`` every batch after the first is sampled by the weights of one update before
the learner's (learning/overlap.py). Plain PPO then clips its ratio around the policy that
*sampled*, so the trust region is centred one update back and the first epoch already starts
off-centre. The decoupled objective (Hilton, Cobbe and Schulman, "Batch size-invariance for
policy optimization", 2022) separates the two roles of that policy:

- the **proximal** policy, the learner's weights when the update starts, centres the clip:
  ``r = pi_theta / pi_prox``, clipped to ``[1 - eps, 1 + eps]``;
- the **behaviour** policy, the one that sampled, enters only as an importance weight on the
  advantage, ``w = pi_prox / pi_behav``, not clipped (as in the paper).

The surrogate is ``w * min(r A, clip(r) A)``, which is PPO's own loss on a batch whose sampling
log-probabilities are the proximal ones and whose advantages are ``w A`` (``w > 0``). Without
lag the two policies are the same, ``w = 1``, and this is PPO. The proximal log-probabilities
cost one forward pass over the batch per iteration (``ProximalLogp``, after GAE).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing

PROX_LOGP = "prox_logp"
"""Batch column: the log-probability of the taken action under the proximal policy."""


class ProximalLogp(ConnectorV2):
    """Learner connector piece (after GAE): each module's log-probability of the batch's actions
    under the weights the update starts from, as ``PROX_LOGP``."""

    def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None,
                 **kwargs: Any):
        with torch.no_grad():
            for mid, module_batch in batch.items():
                if Columns.ACTIONS not in module_batch:
                    continue
                module = rl_module[mid]
                out = module.forward_train(module_batch)
                dist = module.get_train_action_dist_cls().from_logits(
                    out[Columns.ACTION_DIST_INPUTS])
                module_batch[PROX_LOGP] = dist.logp(module_batch[Columns.ACTIONS]).detach()
        return batch


def decoupled_batch(batch: dict) -> tuple[dict, torch.Tensor]:
    """The batch PPO's loss sees under the decoupled objective, and the importance weights:
    sampling log-probabilities replaced by the proximal ones, advantages times
    ``w = exp(prox_logp - behaviour_logp)``; rows outside the loss (``LOSS_MASK`` False: the
    bootstrap steps, whose outputs are constants) get ``w = 1``."""
    prox = batch[PROX_LOGP]
    w = torch.exp(prox - batch[Columns.ACTION_LOGP]).detach()
    mask = batch.get(Columns.LOSS_MASK)
    if mask is not None:
        w = torch.where(mask.bool(), w, torch.ones_like(w))
    out = dict(batch)
    out[Columns.ACTION_LOGP] = prox
    out[Postprocessing.ADVANTAGES] = batch[Postprocessing.ADVANTAGES] * w
    return out, w
