"""Traces for fitting the execution controller (LAMaS): run full graphs in the twin, and at every
finished-node prefix of a multi-agent query compute the realised control advantage

    delta = R(stop there, the vote over the then-finished answers) - R(the full execution)

from the same trace (``controller_reward``; the stopped answer's latency is the prefix's end).
A :class:`TraceRecorder` is a controller that never stops and remembers what it was shown."""

from __future__ import annotations

from inframind_ray.core.types import QueryInfo
from inframind_ray.orchestration.controller import (
    ControllerDecision,
    ControllerInput,
    ControllerReward,
    features,
)
from inframind_ray.orchestration.runner import QueryResult
from inframind_ray.twin.outcome import OutcomeModel


class TraceRecorder:
    """The controller's interface, never stopping: records each input per query."""

    def __init__(self) -> None:
        self.inputs: dict[str, list[ControllerInput]] = {}

    def decide(self, node_id: int, inp: ControllerInput) -> ControllerDecision:
        """Remember ``inp``; go on."""
        self.inputs.setdefault(inp.query_id, []).append(inp)
        return ControllerDecision(node_id, 0.0, False)

    def rows(self, outs: list[QueryResult | QueryInfo], outcome: OutcomeModel,
             reward: ControllerReward | None = None) -> list[dict]:
        """One row per recorded prefix with an answer to give, of every query that finished:
        its feature vector, the realised delta, and what stopping there would have given."""
        reward = reward or ControllerReward()
        out = []
        for res in outs:
            if not isinstance(res, QueryResult) or res.query.query_id not in self.inputs:
                continue
            q = res.query
            full_ok = outcome.is_correct(q.item_id, res.answer, q.task)
            r_full = reward(full_ok, res.latency, q.budget_s, res.status.ok)
            for inp in self.inputs[q.query_id]:
                v = inp.vote
                if v.answer is None:
                    continue  # the controller never stops without an answer
                stop_ok = outcome.is_correct(q.item_id, v.answer, q.task)
                r_stop = reward(stop_ok, inp.elapsed_s, q.budget_s)
                out.append({
                    "query_id": q.query_id, "task": q.task, "topology": inp.topology.value,
                    "nodes_done": len(inp.done_ids), "n_nodes": inp.n_nodes,
                    "elapsed_s": inp.elapsed_s, "latency_s": res.latency,
                    "budget_s": q.budget_s, "stop_correct": stop_ok, "full_correct": full_ok,
                    "delta": r_stop - r_full, "x": features(inp).tolist(),
                })
        return out
