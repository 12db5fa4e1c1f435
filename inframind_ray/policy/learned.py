"""The hierarchical policy's networks (torch) and their use behind the ``Policy`` interface.

Both networks read one row per pool model (``policy/features.py``: live load, EDF view, price
list, toll and the model card), padded to MAX_MODELS rows, through encoders shared by every row,
so their weights do not depend on the pool. Planner (once per query): rows encoded and pooled
(masked mean + max), with the budget, FiLM-modulate the 384-d query embedding -> (topology, K).
Executor (per agent step): every (model, strategy) pair scored by the same weights, conditioned
on the query embedding, role, node kind, topology and budget -> (model, strategy). Both have
value heads. Masked actions get -1e9 logits. Checkpoints are safetensors plus a JSON spec
(format, feature version, dims, hidden; never pickles) and load on any pool of 1..8 models.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from inframind_ray.core.topology import Plan
from inframind_ray.core.types import (
    PoolInfo,
    QueryInfo,
    StepContext,
    StepDecision,
    SystemState,
    TokenBudget,
)
from inframind_ray.errors import ConfigError, InframindError
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import (
    EMB_DIM,
    EXEC_GLOBAL,
    EXEC_MODEL_DIM,
    EXEC_PER_S,
    EXEC_ROW,
    FEATURE_VERSION,
    MAX_MODELS,
    N_STRATEGIES,
    PLAN_ACTIONS,
    PLAN_GLOBAL,
    PLAN_ROW,
    SEM_DIM,
    FeatureBuilder,
    check_pool_size,
    dims,
    plan_of,
)

NEG = -1e9
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "policy"


class CheckpointError(InframindError):
    """A missing, corrupt or mismatched checkpoint."""


def masked(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits with invalid actions pushed to -1e9."""
    return logits.masked_fill(mask <= 0, NEG)


def pool_rows(h: torch.Tensor, row_mask: torch.Tensor) -> torch.Tensor:
    """Masked mean and max over the model rows: [B, R, H] -> [B, 2H]."""
    m = row_mask.unsqueeze(-1)
    mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
    top = h.masked_fill(m <= 0, -1e4).amax(1)
    return torch.cat([mean, top], -1)


def used_rows(row_mask: torch.Tensor) -> int:
    """Rows a batch uses: its largest pool (valid rows are a prefix, ``policy/features.py``)."""
    return max(1, int(row_mask.sum(-1).max().item())) if row_mask.numel() else MAX_MODELS


def valid_rows(row_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch index, row index) of every valid model row of ``row_mask`` [B, r]: what a packed
    forward pass encodes instead of the padded ``[B, r]`` grid."""
    return (row_mask > 0).nonzero(as_tuple=True)


def unpack(values: torch.Tensor, at: tuple[torch.Tensor, torch.Tensor], b: int, r: int,
           fill: float) -> torch.Tensor:
    """Packed per-row ``values`` [N, ...] back on the padded grid [B, r, ...], ``fill``
    elsewhere (differentiable)."""
    out = values.new_full((b, r, *values.shape[1:]), fill)
    return out.index_put(at, values)


class PlannerNet(nn.Module):
    """Shared row encoder, pooled over valid rows; FiLM(query embedding | globals, pooled
    rows) -> (topology, K) logits and a value. Its size does not depend on the pool."""

    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        z = PLAN_GLOBAL + 2 * hidden
        self.row = nn.Sequential(nn.Linear(PLAN_ROW, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(EMB_DIM, hidden), nn.ReLU())
        self.film = nn.Linear(z, 2 * hidden)
        self.trunk = nn.Sequential(nn.Linear(hidden + z, hidden), nn.ReLU())
        self.pi = nn.Linear(hidden, len(PLAN_ACTIONS))
        self.v = nn.Linear(hidden, 1)

    def forward(self, emb: torch.Tensor, glob: torch.Tensor, rows: torch.Tensor,
                row_mask: torch.Tensor, mask: torch.Tensor, n_rows: int = MAX_MODELS
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_rows``: only the first rows are encoded (``used_rows``: the batch's largest
        pool); the result is the same as with all MAX_MODELS."""
        h_rows = self.row(rows.view(rows.shape[0], MAX_MODELS, PLAN_ROW)[:, :n_rows])
        z = torch.cat([glob, pool_rows(h_rows, row_mask[:, :n_rows])], -1)
        gamma, beta = self.film(z).chunk(2, dim=-1)
        h = self.trunk(torch.cat([self.embed(emb) * (1 + gamma) + beta, z], -1))
        return masked(self.pi(h), mask), self.v(h).squeeze(-1)


class ExecutorNet(nn.Module):
    """Scores every (model row, strategy) with the same weights: a row encoder FiLM-conditioned
    on the step's context (embedding, role, kind, topology, budget globals), then a pair scorer
    on (row code, pooled rows, the strategy's price list / toll / accuracy, strategy one-hot).
    Logits over ``row * N_STRATEGIES + strategy`` (padded rows masked); the value head pools
    over valid rows."""

    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        self.ctx = nn.Sequential(nn.Linear(SEM_DIM + EXEC_GLOBAL, hidden), nn.ReLU())
        self.row = nn.Sequential(nn.Linear(EXEC_MODEL_DIM, hidden), nn.ReLU())
        self.film = nn.Linear(hidden, 2 * hidden)
        self.pair_row = nn.Linear(hidden, hidden)
        self.pair_s = nn.Linear(EXEC_PER_S + N_STRATEGIES, hidden)
        self.pair_ctx = nn.Linear(3 * hidden, hidden)
        self.score = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                   nn.Linear(hidden, 1))
        self.v = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("onehot", torch.eye(N_STRATEGIES), persistent=False)

    def forward(self, sem: torch.Tensor, glob: torch.Tensor, rows: torch.Tensor,
                row_mask: torch.Tensor, mask: torch.Tensor, n_rows: int = MAX_MODELS,
                packed: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_rows``: only the first rows are scored (``used_rows``: the batch's largest
        pool), the rest get the masked logit; ``packed``: of those, only the valid ones (a
        batch mixing pool sizes; an invalid row's actions are masked anyway); the result is the
        same as with all MAX_MODELS."""
        b, r = rows.shape[0], n_rows
        rows = rows.view(b, MAX_MODELS, EXEC_ROW)[:, :r]
        c = self.ctx(torch.cat([sem, glob], -1))
        gamma, beta = self.film(c).chunk(2, dim=-1)  # [B, H]
        if packed:  # per valid row [N, ...], its sample's context by index
            at = valid_rows(row_mask[:, :r])
            rows, gamma, beta = rows[at], gamma[at[0]], beta[at[0]]
        else:  # per row of the first r [B, r, ...], the context broadcast
            gamma, beta = gamma.unsqueeze(1), beta.unsqueeze(1)
        per_s = rows[..., EXEC_MODEL_DIM:].reshape(*rows.shape[:-1], N_STRATEGIES, EXEC_PER_S)
        h = self.row(rows[..., :EXEC_MODEL_DIM]) * (1 + gamma) + beta
        h_grid = unpack(h, at, b, r, 0.0) if packed else h  # [B, r, H]
        g = torch.cat([pool_rows(h_grid, row_mask[:, :r]), c], -1)  # [B, 3H]
        ctx = self.pair_ctx(g)
        ctx = ctx[at[0]].unsqueeze(1) if packed else ctx[:, None, None, :]
        onehot = self.onehot.expand(*per_s.shape[:-1], N_STRATEGIES)
        pre = self.pair_row(h).unsqueeze(-2) + self.pair_s(torch.cat([per_s, onehot], -1)) + ctx
        score = self.score(pre).squeeze(-1)  # [B, r, S] or [N, S]
        logits = (unpack(score, at, b, r, NEG) if packed else score).reshape(b, r * N_STRATEGIES)
        if r < MAX_MODELS:  # rows past every pool of the batch: masked, not scored
            logits = torch.cat([logits, logits.new_full((b, (MAX_MODELS - r) * N_STRATEGIES),
                                                        NEG)], -1)
        return masked(logits, mask), self.v(g).squeeze(-1)


PLANNER_KEYS = ("emb", "glob", "rows", "row_mask", "mask")
EXECUTOR_KEYS = ("sem", "glob", "rows", "row_mask", "mask")
FORMAT = "inframind-policy-v2"


def _t(o: dict, keys: tuple[str, ...]) -> list[torch.Tensor]:
    return [torch.from_numpy(o[k]).unsqueeze(0) for k in keys]


def behaviour_probs(logits: torch.Tensor | np.ndarray, epsilon: float) -> np.ndarray:
    """An exploring decision's behaviour policy over the actions of one row of ``logits``:
    ``(1 - epsilon) x softmax + epsilon x uniform over the valid actions`` (masked actions
    have logit ``NEG``); the served draw (``LearnedPolicy.act``) and the learner's check of a
    recorded log-probability (``learning/continual.py``) both read it."""
    x = torch.as_tensor(logits).double()
    valid = (x > NEG / 2).double().numpy()
    p = (1 - epsilon) * torch.softmax(x, -1).numpy() + epsilon * valid / valid.sum()
    return p / p.sum()


class LearnedPolicy(Policy):
    """The hierarchical policy behind the common interface (greedy at inference). The networks
    do not depend on the pool: only the FeatureBuilder does."""

    name = "inframind"

    def __init__(self, pool: PoolInfo, seed: int = 0, hidden: int = 128,
                 token_budget: TokenBudget = False) -> None:
        super().__init__(pool, seed)
        torch.manual_seed(seed)
        self.token_budget = token_budget
        self.features = FeatureBuilder(pool, token_budget)
        self.planner = PlannerNet(hidden)
        self.executor = ExecutorNet(hidden)
        self.hidden = hidden
        self._traced: dict[tuple[str, int], torch.jit.ScriptModule] = {}

    @torch.inference_mode()
    def _forward(self, which: str, obs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward pass (logits, value) through a TorchScript trace of the net (batch 1; it
        shares the net's parameters, so loading weights later still applies), about half the
        Python overhead of the eager modules per decision."""
        net = getattr(self, which)
        x = _t(obs, PLANNER_KEYS if which == "planner" else EXECUTOR_KEYS)
        fn = self._traced.get((which, id(net)))
        if fn is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = self._traced[(which, id(net))] = torch.jit.trace(net, x, check_trace=False)
        return fn(*x)

    def _logits(self, which: str, obs: dict) -> torch.Tensor:
        return self._forward(which, obs)[0]

    def act(self, which: str, obs: dict, rng: np.random.Generator | None = None,
            epsilon: float = 0.0) -> tuple[int, float, float]:
        """The greedy action of ``planner`` or ``executor`` on ``obs``, its log-probability
        under the net's softmax and the value estimate (what a rollout records). Given ``rng``
        (exploration), the action is drawn from the behaviour policy ``(1 - epsilon) x softmax
        + epsilon x uniform over the valid actions`` and its log-probability is that policy's
        (what an importance ratio needs)."""
        logits, value = self._forward(which, obs)
        logp = torch.log_softmax(logits[0], -1)
        if rng is None:
            action = int(logp.argmax())
            return action, float(logp[action]), float(value[0])
        p = behaviour_probs(logits[0], epsilon)
        action = int(rng.choice(len(p), p=p))
        return action, float(np.log(p[action])), float(value[0])

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        return plan_of(int(self._logits("planner", self.features.planner(query, state))
                           .argmax(-1)))

    def _decide(self, ctx: StepContext) -> StepDecision:
        action = int(self._logits("executor", self.features.executor(ctx)).argmax(-1))
        model, strategy = self.features.decision(action)
        return StepDecision(model, strategy)

    # ------------------------------------------------------------------ checkpoints
    def spec(self) -> dict:
        """What a checkpoint must match to be loaded (never the pool: any 1..8 models)."""
        return {"format": FORMAT, "feature_version": FEATURE_VERSION, "dims": dims(),
                "hidden": self.hidden, "token_budget": self.token_budget}

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """Write ``path/policy.safetensors`` and ``path/spec.json`` (``meta``: provenance such as
        the training pools, informational)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {f"planner.{k}": v for k, v in self.planner.state_dict().items()}
        tensors |= {f"executor.{k}": v for k, v in self.executor.state_dict().items()}
        save_file({k: v.contiguous() for k, v in tensors.items()}, path / "policy.safetensors")
        (path / "spec.json").write_text(json.dumps(self.spec() | (meta or {}), indent=2))
        return path

    @staticmethod
    def read_spec(path: Path) -> dict:
        """A checkpoint's spec.json; CheckpointError with a one-line reason if it is not a
        current (per-model-row) checkpoint."""
        try:
            spec = json.loads((path / "spec.json").read_text())
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {path}: no spec.json") from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"checkpoint {path}: spec.json is not JSON ({e.msg})") from None
        fmt = spec.get("format")
        if fmt == "inframind-policy-v1":
            raise CheckpointError(
                f"checkpoint {path}: a positional v1 checkpoint (models {spec.get('models')}); "
                f"the policy now takes per-model rows ({FORMAT}): retrain it (docs/learning.md) "
                "or run it as policy inframind-v1")
        if fmt != FORMAT:
            raise CheckpointError(f"checkpoint {path}: unknown format {fmt!r}")
        if spec.get("dims") != dims():
            raise CheckpointError(f"checkpoint {path}: feature dims {spec.get('dims')} differ "
                                  f"from this version's {dims()}")
        return spec

    @classmethod
    def load(cls, path: str | Path, pool: PoolInfo) -> LearnedPolicy:
        """Load a checkpoint for any pool of 1..MAX_MODELS models; CheckpointError with a
        one-line reason otherwise."""
        path = Path(path)
        spec = cls.read_spec(path)
        try:
            check_pool_size(pool)
        except ConfigError as e:
            raise CheckpointError(f"checkpoint {path}: {e.message}") from None
        budget = spec.get("token_budget", False)
        if budget not in (True, False, "tail"):
            raise CheckpointError(f"checkpoint {path}: token_budget {budget!r} is not true, false "
                                  "or 'tail'")
        policy = cls(pool, hidden=int(spec.get("hidden", 128)), token_budget=budget)
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
