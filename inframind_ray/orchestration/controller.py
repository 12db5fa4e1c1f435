"""LAMaS's run-time execution controller: stop a multi-agent query early when finishing it would
not pay.

Whenever a node of a multi-agent plan finishes, the workflow runner (on either clock) builds a
:class:`ControllerInput` -- the execution's progress, the answers so far, the query's difficulty
features and the live load -- and asks :meth:`ExecutionController.decide`. The controller
predicts the control advantage

    delta_k = R(stop now, with the vote over the finished answers) - R(run the rest)

with an ensemble of small MLPs (each fitted by MSE regression on twin traces of full executions,
see ``bench/controller_fit.py``; inputs include the prior accuracy of the models that agree and
of those still pending) and says stop when its rule's statistic exceeds ``threshold`` (0): with
rule ``all``, every member's delta. The runner then
cancels the pending calls (the backends abort their engine requests) and the answer is the vote
over what finished (:func:`vote`).

``R`` is :func:`controller_reward`: the learning room's ``quality - lam * lateness`` plus an
explicit time-use term ``- mu * latency / budget`` (LAMaS's latency term; with ``mu = 0`` it is
the learning room's reward exactly, which gives no reason to stop a query that will finish
within its budget). Everything here is a pure function of its inputs: no clock, no I/O, numpy
only at decision time.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from inframind_ray.core.topology import MAX_AGENTS, Topology, WorkflowGraph
from inframind_ray.core.types import SystemState
from inframind_ray.errors import InframindError
from inframind_ray.tasks.registry import FAMILIES

DEFAULT_CONTROLLER = Path(__file__).resolve().parent.parent / "data" / "controller"
"""The shipped fitted controller (``inframind controller fit``; docs/controller.md)."""
FORMAT = "inframind-controller/2"  # /2: ensemble members, rule, model priors
EMBED_DIMS = 8  # the query embedding enters through a fixed random projection to this many dims


class CheckpointError(InframindError):
    """A controller checkpoint that cannot be read (one line, exit code 2 at the CLI)."""


# ---------------------------------------------------------------------------------- the reward
@dataclass(frozen=True)
class ControllerReward:
    """``quality - lam * lateness - mu * latency / budget`` of one answered (or not) query:
    quality 1 for a correct answer within budget; lateness ``min(1, latency / budget - 1)``, 1
    when nothing was answered (as ``learning/env.query_terms``)."""

    lam: float = 1.0  # the learning room's lambda (rllib_configs/default.yaml lam_init)
    mu: float = 0.1  # time use: a whole budget's worth of latency costs 0.1 of a right answer

    def __call__(self, correct: bool, latency_s: float, budget_s: float,
                 answered: bool = True) -> float:
        ratio = latency_s / budget_s
        quality = float(correct and answered and ratio <= 1.0 + 1e-9)
        late = min(1.0, max(0.0, ratio - 1.0)) if answered else 1.0
        return quality - self.lam * late - self.mu * min(ratio, 2.0)


# ---------------------------------------------------------------------- answers and the vote
def same_answer(task: str, a: str | None, b: str | None) -> bool:
    """The task family's answer equivalence: equal extracted answers (a letter, a canonical
    number, a program), and for MATH also mathematically equal ones (math-verify)."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    return task == "math" and _math_equal(*sorted((a, b)))


@lru_cache(maxsize=8192)
def _math_equal(a: str, b: str) -> bool:
    from inframind_ray.grading.math_answer import math_equal

    return math_equal(a, b)[0]


def answer_groups(task: str, answers: Sequence[str | None]) -> list[list[int]]:
    """Indices of ``answers`` grouped by equivalence (None answers left out), largest group
    first, ties in order of first appearance."""
    groups: list[list[int]] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for g in groups:
            if same_answer(task, answers[g[0]], a):
                g.append(i)
                break
        else:
            groups.append([i])
    return sorted(groups, key=lambda g: (-len(g), g[0]))


@dataclass(frozen=True)
class Vote:
    """The aggregator's rule over finished answers: the plurality answer (ties: the group whose
    latest member finished last, as the most informed), and the nodes that gave it."""

    answer: str | None
    support: tuple[int, ...]  # node ids whose answers make the winning group


def vote(task: str, finished: Sequence[tuple[int, str | None]]) -> Vote:
    """Plurality over ``(node id, answer)`` in finish order under the family's equivalence."""
    groups = answer_groups(task, [a for _, a in finished])
    if not groups:
        return Vote(None, ())
    top = len(groups[0])
    best = max((g for g in groups if len(g) == top), key=lambda g: g[-1])
    return Vote(finished[best[0]][1], tuple(finished[i][0] for i in best))


# ---------------------------------------------------------------------------------- the input
@dataclass(frozen=True)
class ControllerInput:
    """What the controller sees when a node finishes. Times are seconds since the query's
    arrival (either clock); ``answers`` are the finished nodes' extracted answers in finish
    order (None: failed or no answer)."""

    query_id: str
    task: str
    category: str
    topology: Topology
    k: int
    n_nodes: int
    critical_path: int  # nodes on the longest path
    done_ids: tuple[int, ...]  # finished nodes in finish order
    answers: tuple[str | None, ...]
    done_depth: int  # longest chain of finished nodes from a source (critical path progress)
    elapsed_s: float
    budget_s: float
    kv_usage: float = 0.0  # mean over the pool's models
    waiting_per_replica: float = 0.0
    running_per_replica: float = 0.0
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)
    # the models behind the answers: each finished node's prior accuracy on the query's family
    # and category (its model card, TRAIN split; finish order, as ``answers``), and that of
    # each pending node whose model is chosen (None: not chosen yet, as an aggregator that
    # starts once its inputs are in); empty when the caller knows no models
    priors: tuple[float | None, ...] = ()
    pending_priors: tuple[float | None, ...] = ()
    pool_prior: float = 0.0  # the best prior accuracy among the pool's models

    @property
    def vote(self) -> Vote:
        """The answer the query would give if stopped now."""
        return vote(self.task, list(zip(self.done_ids, self.answers, strict=True)))


def make_input(query, plan, graph: WorkflowGraph, done: Sequence[tuple[int, str | None]],
               now: float, state: SystemState, models: Mapping[int, str] | None = None,
               pool=None) -> ControllerInput:  # noqa: ANN001 - a PoolInfo
    """The controller's input from the runner's view (``query``: a QueryInfo, ``plan``: a Plan,
    ``done``: (node id, answer) in finish order, ``now`` on the query's clock; ``models``: the
    model chosen for each node so far and ``pool`` (a PoolInfo) its card, for the priors)."""
    ids = {i for i, _ in done}
    priors: tuple[float | None, ...] = ()
    pending: tuple[float | None, ...] = ()
    pool_prior = 0.0
    if models is not None and pool is not None:
        def prior(node: int) -> float | None:
            m = models.get(node)
            names = pool.names
            return None if m is None or m not in names else float(
                pool[m].expected_accuracy(query))

        priors = tuple(prior(i) for i, _ in done)
        pending = tuple(prior(n.id) for n in graph.nodes if n.id not in ids)
        pool_prior = max(float(m.expected_accuracy(query)) for m in pool.models)
    up: dict[int, int] = {}
    for n in graph.nodes:  # topological: the longest chain of finished nodes ending at n
        up[n.id] = (1 + max((up[d] for d in n.deps), default=0)) if n.id in ids else 0
    snaps = [s for s in state.models.values() if s.available]
    reps = max(1, sum(s.replicas for s in snaps))
    return ControllerInput(
        query_id=query.query_id, task=query.task, category=query.category,
        topology=plan.topology, k=plan.k,
        n_nodes=len(graph.nodes), critical_path=graph.critical_path_len,
        done_ids=tuple(i for i, _ in done), answers=tuple(a for _, a in done),
        done_depth=max(up.values(), default=0), elapsed_s=now - query.arrival_s,
        budget_s=query.budget_s,
        kv_usage=float(np.mean([s.kv_usage for s in snaps])) if snaps else 0.0,
        waiting_per_replica=sum(s.waiting for s in snaps) / reps,
        running_per_replica=sum(s.running for s in snaps) / reps,
        embedding=query.embedding, priors=priors, pending_priors=pending, pool_prior=pool_prior)


def is_decision_point(graph: WorkflowGraph, node_id: int) -> bool:
    """The controller is asked after every finished node of a multi-agent plan but the final
    one (after which nothing is left to stop)."""
    return len(graph.nodes) > 1 and node_id != graph.final.id


# ------------------------------------------------------------------------------- the features
TOPOLOGIES = tuple(Topology)
FEATURE_NAMES = (
    *(f"task={t}" for t in FAMILIES), *(f"topology={t.value}" for t in TOPOLOGIES),
    "k", "nodes_done", "nodes_left", "path_done", "finals_left", "time_used", "log_budget",
    "n_answers", "n_missing", "n_groups", "top_share", "top_count", "runner_up", "latest_agrees",
    "kv_usage", "waiting", "running",
    *(f"emb{i}" for i in range(EMBED_DIMS)),
)
BASE_FEATURES = len(FEATURE_NAMES)
"""The features of the first shipped controller (inframind-controller/1); those after them name
the models that agree."""
FEATURE_NAMES = (
    *FEATURE_NAMES,
    # the models that agree (docs/controller.md): prior accuracies from the model cards
    "priors_known", "agree_prior_max", "agree_prior_mean", "other_prior_max",
    "pending_prior_max", "pending_undecided", "pending_gap", "pool_prior",
)


def _projection(dim: int) -> np.ndarray:
    """The fixed random projection of a query embedding (seeded, so every process agrees)."""
    rng = np.random.default_rng(zlib.crc32(b"controller-projection"))
    return (rng.standard_normal((dim, EMBED_DIMS)) / np.sqrt(dim)).astype(np.float32)


def features(inp: ControllerInput) -> np.ndarray:
    """The MLP's input vector (``FEATURE_NAMES``)."""
    groups = answer_groups(inp.task, inp.answers)
    n_ans = sum(a is not None for a in inp.answers)
    top = len(groups[0]) if groups else 0
    second = len(groups[1]) if len(groups) > 1 else 0
    latest = next((i for i in range(len(inp.answers) - 1, -1, -1)
                   if inp.answers[i] is not None), None)
    latest_agrees = float(bool(groups) and latest is not None and latest in groups[0])
    done = len(inp.done_ids)
    emb = np.zeros(EMBED_DIMS, np.float32)
    if inp.embedding is not None and len(inp.embedding):
        e = np.asarray(inp.embedding, np.float32)
        emb = e @ _projection(len(e))
    x = [
        *(float(inp.task == t) for t in FAMILIES),
        *(float(inp.topology is t) for t in TOPOLOGIES),
        inp.k / MAX_AGENTS, done / inp.n_nodes, (inp.n_nodes - done) / MAX_AGENTS,
        inp.done_depth / inp.critical_path, float(inp.critical_path - inp.done_depth),
        min(2.0, inp.elapsed_s / inp.budget_s), float(np.log(max(1.0, inp.budget_s))),
        n_ans / MAX_AGENTS, (done - n_ans) / MAX_AGENTS, len(groups) / MAX_AGENTS,
        top / n_ans if n_ans else 0.0, top / MAX_AGENTS, second / MAX_AGENTS, latest_agrees,
        inp.kv_usage, float(np.log1p(inp.waiting_per_replica)),
        float(np.log1p(inp.running_per_replica)),
    ]
    return np.concatenate([np.asarray(x, np.float32), emb, prior_features(inp)])


def prior_features(inp: ControllerInput) -> np.ndarray:
    """Who agrees: the prior accuracies (model cards) of the winning group's models, of the
    other finished answers, of the pending nodes whose model is chosen (and how many are not
    chosen yet), the gap between the best pending and the best agreeing model, and the pool's
    best. Zeros when the input names no models."""
    if not inp.priors:
        return np.zeros(8, np.float32)
    support = set(inp.vote.support)
    agree = [p for i, p in zip(inp.done_ids, inp.priors, strict=True)
             if i in support and p is not None]
    other = [p for i, p, a in zip(inp.done_ids, inp.priors, inp.answers, strict=True)
             if i not in support and a is not None and p is not None]
    pend = [p for p in inp.pending_priors if p is not None]
    a_max = max(agree, default=0.0)
    p_max = max(pend, default=0.0)
    return np.asarray([
        1.0, a_max, float(np.mean(agree)) if agree else 0.0, max(other, default=0.0), p_max,
        sum(p is None for p in inp.pending_priors) / MAX_AGENTS,
        p_max - a_max if pend else 0.0, inp.pool_prior,
    ], np.float32)


# ---------------------------------------------------------------------------------- the model
RULES = ("mean", "all")
"""Decision rules: ``mean`` stops when the members' mean delta exceeds the threshold; ``all``
only when every member's does (the ensemble's lower bound: a stop needs no member to doubt it)."""


@dataclass(frozen=True)
class ControllerDecision:
    """What the controller said at one finished node."""

    node_id: int  # the node whose end prompted the decision
    delta: float  # the rule's statistic of the predicted control advantage (stop iff > 0)
    stop: bool


Layers = list[tuple[np.ndarray, np.ndarray]]  # (W: in x out, b: out) per layer


def _forward(layers: Layers, h: np.ndarray) -> np.ndarray:
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h[..., 0]


@dataclass
class ControllerModel:
    """The fitted MLP (ReLU hidden layers) with its input standardisation, as numpy arrays; an
    ensemble when ``more`` holds further members (same inputs, other seeds and data)."""

    weights: Layers
    mean: np.ndarray
    std: np.ndarray
    reward: ControllerReward = ControllerReward()
    meta: dict = field(default_factory=dict)
    more: list[Layers] = field(default_factory=list)
    rule: str = "mean"

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise CheckpointError(f"controller rule {self.rule!r}, expected one of {RULES}")

    @property
    def members(self) -> list[Layers]:
        """Every member's layers, the first one first."""
        return [self.weights, *self.more]

    def predict_members(self, x: np.ndarray) -> np.ndarray:
        """Each member's predicted delta: (members,) + the batch shape."""
        h = (np.asarray(x, np.float32) - self.mean) / self.std
        return np.stack([_forward(m, h) for m in self.members])

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted delta (the members' mean) for a batch (n, features) or one vector."""
        return self.predict_members(x).mean(0)

    def score(self, x: np.ndarray) -> np.ndarray:
        """The decision rule's statistic: the mean (``mean``) or the lowest member (``all``)."""
        p = self.predict_members(x)
        return p.min(0) if self.rule == "all" else p.mean(0)

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """Write ``path/controller.safetensors`` and ``path/spec.json``."""
        from safetensors.numpy import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {"mean": self.mean, "std": self.std}
        for j, layers in enumerate(self.members):
            pre = f"m{j}." if j else ""
            for i, (w, b) in enumerate(layers):
                tensors[f"{pre}w{i}"], tensors[f"{pre}b{i}"] = w, b
        save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
                  str(path / "controller.safetensors"))
        spec = {"format": FORMAT, "features": list(FEATURE_NAMES), "layers": len(self.weights),
                "hidden": [int(w.shape[1]) for w, _ in self.weights[:-1]],
                "members": len(self.members), "rule": self.rule,
                "reward": {"lam": self.reward.lam, "mu": self.reward.mu},
                **{k: v for k, v in (meta or self.meta).items()
                   if k not in ("members", "rule", "format", "features", "layers")}}
        (path / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> ControllerModel:
        """Read a checkpoint; CheckpointError with a one-line reason if it cannot."""
        from safetensors.numpy import load_file

        path = Path(path)
        try:
            spec = json.loads((path / "spec.json").read_text())
        except FileNotFoundError:
            raise CheckpointError(f"controller {path}: no spec.json") from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"controller {path}: spec.json is not JSON ({e.msg})") from None
        if spec.get("format") != FORMAT:
            raise CheckpointError(f"controller {path}: format {spec.get('format')!r}, expected "
                                  f"{FORMAT!r}")
        if spec.get("features") != list(FEATURE_NAMES):
            raise CheckpointError(f"controller {path}: its features differ from this code's "
                                  "(refit with `inframind controller fit`)")
        try:
            t = load_file(str(path / "controller.safetensors"))
        except FileNotFoundError:
            raise CheckpointError(f"controller {path}: no controller.safetensors") from None
        except Exception as e:  # safetensors raises its own error types on corrupt files
            raise CheckpointError(f"controller {path}: unreadable weights ({e})") from None
        n_layers, n_members = int(spec["layers"]), int(spec.get("members", 1))
        try:
            members = [[(t[f"{p}w{i}"], t[f"{p}b{i}"]) for i in range(n_layers)]
                       for p in ("", *(f"m{j}." for j in range(1, n_members)))]
        except KeyError as e:
            raise CheckpointError(f"controller {path}: no tensor {e} in its weights") from None
        r = spec.get("reward", {})
        return cls(members[0], t["mean"], t["std"],
                   ControllerReward(r.get("lam", 1.0), r.get("mu", 0.1)), spec, members[1:],
                   spec.get("rule", "mean"))


class ExecutionController:
    """Stop when the model's rule statistic (``ControllerModel.score``) exceeds ``threshold``.
    ``decide`` is a pure function of its input (the same on both clocks)."""

    def __init__(self, model: ControllerModel, threshold: float = 0.0) -> None:
        self.model = model
        self.threshold = threshold

    @classmethod
    def load(cls, path: str | Path | None = None, threshold: float = 0.0
             ) -> ExecutionController:
        """The controller of a checkpoint (default: the shipped one)."""
        return cls(ControllerModel.load(path or DEFAULT_CONTROLLER), threshold)

    def decide(self, node_id: int, inp: ControllerInput) -> ControllerDecision:
        """Stop now? Never without an answer to give."""
        if not any(a is not None for a in inp.answers):
            return ControllerDecision(node_id, float("-inf"), False)
        delta = float(self.model.score(features(inp)))
        return ControllerDecision(node_id, delta, delta > self.threshold)
