"""The hierarchical policy's networks (torch) and their use behind the ``Policy`` interface.

Planner (once per query): the 384-d query embedding, modulated by FiLM from the system-state
vector z0 (budget, per-model queue depth, running, KV usage, latency, metric age), picks
(topology, K). Executor (per agent step): a semantic pathway (query embedding, role, node kind,
topology) and a resource pathway (budget left on the critical path, live per-model metrics, the
action-conditional latency price list) pick (model, strategy). Both have value heads. Masked
actions get -inf logits. Checkpoints are safetensors plus a JSON spec (never pickles).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from inframind_ray.core.topology import Plan
from inframind_ray.core.types import PoolInfo, QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.errors import InframindError
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import EMB_DIM, FeatureBuilder, plan_of

NEG = -1e9
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "policy"


class CheckpointError(InframindError):
    """A missing, corrupt or mismatched checkpoint."""


def masked(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits with invalid actions pushed to -1e9."""
    return logits.masked_fill(mask <= 0, NEG)


class PlannerNet(nn.Module):
    """FiLM(query embedding | z0) -> (topology, K) logits and a value."""

    def __init__(self, z_dim: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(EMB_DIM, hidden), nn.ReLU())
        self.film = nn.Linear(z_dim, 2 * hidden)
        self.trunk = nn.Sequential(nn.Linear(hidden + z_dim, hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, emb: torch.Tensor, z: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        gamma, beta = self.film(z).chunk(2, dim=-1)
        h = self.embed(emb) * (1 + gamma) + beta
        h = self.trunk(torch.cat([h, z], dim=-1))
        return masked(self.pi(h), mask), self.v(h).squeeze(-1)


class ExecutorNet(nn.Module):
    """Semantic + resource pathways -> (model, strategy) logits and a value."""

    def __init__(self, sem_dim: int, res_dim: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.sem = nn.Sequential(nn.Linear(sem_dim, hidden), nn.ReLU())
        self.res = nn.Sequential(nn.Linear(res_dim, hidden), nn.ReLU())
        self.fuse = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, sem: torch.Tensor, res: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fuse(torch.cat([self.sem(sem), self.res(res)], dim=-1))
        return masked(self.pi(h), mask), self.v(h).squeeze(-1)


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x).unsqueeze(0)


class LearnedPolicy(Policy):
    """The hierarchical policy behind the common interface (greedy at inference)."""

    name = "inframind"

    def __init__(self, pool: PoolInfo, seed: int = 0, hidden: int = 128,
                 token_budget: bool = False) -> None:
        super().__init__(pool, seed)
        torch.manual_seed(seed)
        self.token_budget = token_budget
        self.features = FeatureBuilder(pool, token_budget)
        f = self.features
        self.planner = PlannerNet(f.z_dim, f.n_plan, hidden)
        self.executor = ExecutorNet(f.sem_dim, f.res_dim, f.n_exec, hidden)
        self.hidden = hidden

    @torch.no_grad()
    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        o = self.features.planner(query, state)
        logits, _ = self.planner(_t(o["emb"]), _t(o["z"]), _t(o["mask"]))
        return plan_of(int(logits.argmax(-1)))

    @torch.no_grad()
    def _decide(self, ctx: StepContext) -> StepDecision:
        o = self.features.executor(ctx)
        logits, _ = self.executor(_t(o["sem"]), _t(o["res"]), _t(o["mask"]))
        model, strategy = self.features.decision(int(logits.argmax(-1)))
        return StepDecision(model, strategy)

    # ------------------------------------------------------------------ checkpoints
    def spec(self) -> dict:
        """What a checkpoint must match to be loaded into a pool."""
        return {"format": "inframind-policy-v1", "models": list(self.pool.names),
                "hidden": self.hidden, "z_dim": self.features.z_dim,
                "sem_dim": self.features.sem_dim, "res_dim": self.features.res_dim,
                "token_budget": self.token_budget}

    def save(self, path: str | Path) -> Path:
        """Write ``path/policy.safetensors`` and ``path/spec.json``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {f"planner.{k}": v for k, v in self.planner.state_dict().items()}
        tensors |= {f"executor.{k}": v for k, v in self.executor.state_dict().items()}
        save_file({k: v.contiguous() for k, v in tensors.items()}, path / "policy.safetensors")
        (path / "spec.json").write_text(json.dumps(self.spec(), indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path, pool: PoolInfo) -> LearnedPolicy:
        """Load a checkpoint for ``pool``; CheckpointError with a one-line reason otherwise."""
        path = Path(path)
        try:
            spec = json.loads((path / "spec.json").read_text())
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path}: no spec.json") from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"checkpoint {path}: spec.json is not JSON ({e.msg})") from None
        if spec.get("format") != "inframind-policy-v1":
            raise CheckpointError(f"checkpoint {path}: unknown format {spec.get('format')!r}")
        if list(spec.get("models", [])) != list(pool.names):
            raise CheckpointError(f"checkpoint {path}: trained for models {spec.get('models')}, "
                                  f"the pool has {list(pool.names)}")
        policy = cls(pool, hidden=int(spec.get("hidden", 128)),
                     token_budget=bool(spec.get("token_budget", False)))
        try:
            tensors = load_file(path / "policy.safetensors")
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path}: no policy.safetensors") from None
        except Exception as e:  # safetensors raises its own error types on corrupt files
            raise CheckpointError(f"checkpoint {path}: corrupt weights ({e})") from None
        try:
            policy.planner.load_state_dict(
                {k.removeprefix("planner."): v for k, v in tensors.items()
                 if k.startswith("planner.")})
            policy.executor.load_state_dict(
                {k.removeprefix("executor."): v for k, v in tensors.items()
                 if k.startswith("executor.")})
        except RuntimeError as e:
            first = str(e).splitlines()[0]
            raise CheckpointError(f"checkpoint {path}: weights do not fit ({first})") from None
        return policy
