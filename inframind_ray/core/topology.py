"""Multi-agent topologies as DAGs of agent nodes ending in one final node."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property


class Topology(enum.StrEnum):
    """The planner's topology choices (MasRouter / INFRAMIND set)."""

    IO = "io"
    COT = "cot"
    CHAIN = "chain"
    DEBATE = "debate"
    REFLECTION = "reflection"
    FULLCONNECTED = "fullconnected"


class NodeKind(enum.StrEnum):
    """What a node does with its inputs (the twin's outcome model keys on this)."""

    SOLVER = "solver"  # answers the query alone
    REFINER = "refiner"  # answers after reading upstream answers
    AGGREGATOR = "aggregator"  # combines upstream answers into the final one


@dataclass(frozen=True)
class AgentNode:
    """One agent call in the DAG; ``deps`` are node ids whose outputs it reads."""

    id: int
    role: str
    kind: NodeKind
    deps: tuple[int, ...] = ()
    slot: int = 0  # position among the plan's agents (lets a policy assign models per agent)


DEFAULT_ROLES = ("solver", "analyst", "critic", "expert", "verifier", "generalist")
AGGREGATOR_ROLE = "aggregator"
MAX_AGENTS = 6


@dataclass(frozen=True)
class Plan:
    """The planner's output: topology, agent count K, roles (len K) and debate rounds."""

    topology: Topology
    k: int = 1
    roles: tuple[str, ...] = ("solver",)
    rounds: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.k <= MAX_AGENTS:
            raise ValueError(f"k must be in 1..{MAX_AGENTS}, got {self.k}")
        if len(self.roles) != self.k:
            raise ValueError(f"roles must have k={self.k} entries, got {len(self.roles)}")
        if self.topology in (Topology.IO, Topology.COT) and self.k != 1:
            raise ValueError(f"{self.topology.value} has exactly one agent")

    @classmethod
    def make(cls, topology: Topology | str, k: int = 1, rounds: int = 2) -> Plan:
        """A plan with default roles; single-agent topologies force k=1, reflection k=2."""
        topology = Topology(topology)
        if topology in (Topology.IO, Topology.COT):
            k = 1
        elif topology is Topology.REFLECTION:
            k = 2
        else:
            k = max(2, k)
        return cls(topology, k, tuple(DEFAULT_ROLES[i % len(DEFAULT_ROLES)] for i in range(k)),
                   rounds)


@dataclass(frozen=True)
class WorkflowGraph:
    """Nodes in topological order; the last node is final and (transitively) reads all others."""

    nodes: tuple[AgentNode, ...]

    @property
    def final(self) -> AgentNode:
        """The node whose answer is the query's answer."""
        return self.nodes[-1]

    @cached_property
    def _depth_to_end(self) -> dict[int, int]:
        """Nodes on the longest path from each node to the final node, itself included."""
        children: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for d in n.deps:
                children[d].append(n.id)
        depth: dict[int, int] = {}
        for n in reversed(self.nodes):
            depth[n.id] = 1 + max((depth[c] for c in children[n.id]), default=0)
        return depth

    def remaining_depth(self, node_id: int) -> int:
        """Sequential agent calls left on the critical path starting at this node."""
        return self._depth_to_end[node_id]

    @property
    def critical_path_len(self) -> int:
        """Number of sequential agent calls on the longest path."""
        return max(self._depth_to_end.values())

    def path_through(self, node_id: int) -> int:
        """Nodes on the longest path through ``node_id`` (LAMaS credit uses this)."""
        up: dict[int, int] = {}
        for n in self.nodes:
            up[n.id] = 1 + max((up[d] for d in n.deps), default=0)
        return up[node_id] + self._depth_to_end[node_id] - 1


def build_graph(plan: Plan) -> WorkflowGraph:
    """Expand a plan into its DAG.

    - IO, CoT: one solver (CoT demands step-by-step strategies, see prompts).
    - Chain(K): solver -> refiner -> ... -> aggregator.
    - Debate(K, R): K solvers, then R-1 rounds of K refiners reading every agent of the previous
      round, then an aggregator.
    - Reflection: solver -> critic (refiner) -> aggregator (revises with the critique).
    - FullConnected(K): agent i reads every agent j < i, then an aggregator reading all.
    """
    t, k, roles = plan.topology, plan.k, plan.roles
    nodes: list[AgentNode] = []

    def add(role: str, kind: NodeKind, deps: tuple[int, ...], slot: int) -> int:
        nodes.append(AgentNode(len(nodes), role, kind, deps, slot))
        return len(nodes) - 1

    if t in (Topology.IO, Topology.COT):
        add(roles[0], NodeKind.SOLVER, (), 0)
    elif t is Topology.CHAIN:
        prev = add(roles[0], NodeKind.SOLVER, (), 0)
        for i in range(1, k):
            prev = add(roles[i], NodeKind.REFINER, (prev,), i)
        add(AGGREGATOR_ROLE, NodeKind.AGGREGATOR, (prev,), k)
    elif t is Topology.DEBATE:
        layer = tuple(add(roles[i], NodeKind.SOLVER, (), i) for i in range(k))
        for _ in range(max(0, plan.rounds - 1)):
            layer = tuple(add(roles[i], NodeKind.REFINER, layer, i) for i in range(k))
        add(AGGREGATOR_ROLE, NodeKind.AGGREGATOR, layer, k)
    elif t is Topology.REFLECTION:
        a = add(roles[0], NodeKind.SOLVER, (), 0)
        b = add(roles[1] if k > 1 else "critic", NodeKind.REFINER, (a,), 1)
        add(AGGREGATOR_ROLE, NodeKind.AGGREGATOR, (a, b), k)
    elif t is Topology.FULLCONNECTED:
        ids: list[int] = []
        for i in range(k):
            ids.append(add(roles[i], NodeKind.SOLVER if i == 0 else NodeKind.REFINER,
                           tuple(ids), i))
        add(AGGREGATOR_ROLE, NodeKind.AGGREGATOR, tuple(ids), k)
    else:  # pragma: no cover - enum is closed
        raise ValueError(f"unknown topology {t}")
    return WorkflowGraph(tuple(nodes))
