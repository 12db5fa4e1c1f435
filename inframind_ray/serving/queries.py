"""A query from its request (a benchmark item of a task family, or free text), the families'
real graders on an answer (what the orchestrator needs of the task rooms), and the answer's
response body."""

from __future__ import annotations

import asyncio
import math
import uuid

from inframind_ray.core.request import RequestStatus
from inframind_ray.core.topology import build_graph
from inframind_ray.core.types import QueryInfo
from inframind_ray.orchestration.runner import QueryResult
from inframind_ray.tasks.base import free_text_prompt_tokens
from inframind_ray.tasks.registry import family, reference_family


class UserError(ValueError):
    """A request the client must fix (HTTP 400)."""


class NotFound(UserError):
    """A request naming an item that does not exist (HTTP 404)."""


def query_info(payload: dict, arrival: float) -> QueryInfo:
    """A benchmark item's query from its task family (MMLU-Pro unless ``task`` names
    another), or a free-text query (its ``task`` says how a ``reference`` grades it)."""
    item_id = payload.get("item_id")
    text = payload.get("query") or ""
    query_id = payload.get("query_id") or uuid.uuid4().hex[:12]
    budget = float(payload["budget_s"])
    task = payload.get("task") or ("mmlu_pro" if item_id is not None else "free")
    if item_id is None:
        return QueryInfo(query_id=query_id, text=text, budget_s=budget, arrival_s=arrival,
                         prompt_tokens=free_text_prompt_tokens(text), task=task)
    try:
        return family(task).query(item_id, query_id, budget, arrival, text=text or None)
    except KeyError as e:
        raise NotFound(str(e).strip("'\"")) from None
    except ValueError as e:
        raise UserError(str(e).strip("'\"")) from None


def grade_final(q: QueryInfo, text: str | None, reference: str | None) -> bool | None:
    """The family's real grader on the final response (code runs in the sandbox): against
    the item, or against a free-text query's reference; None when there is nothing to grade
    against."""
    from inframind_ray.grading import grade

    if q.item_id is not None:
        return family(q.task).grade(q.item_id, text)
    if reference is None:
        return None
    return grade(reference_family(q.task), text, {"reference": reference}).correct


async def grade_answer(payload: dict) -> dict:
    """``POST /v1/grade``: an answer graded by the family's real grader; a code answer that
    does not parse is wrong (``correct`` false, the parse error in ``detail``)."""
    from functools import partial

    from inframind_ray.grading import GradingInputError, grade

    task, item_id, answer = payload["task"], payload.get("item_id"), payload["answer"]
    try:
        if item_id is not None:
            try:
                item = family(task).item(item_id)
            except KeyError as e:
                return {"http_status": 404, "error": str(e).strip("'\"")}
        else:
            task, item = reference_family(task), {"reference": payload["reference"]}
        res = await asyncio.get_running_loop().run_in_executor(
            None, partial(grade, task, answer, item, strict=True))
    except GradingInputError as e:  # a program that does not parse is a wrong answer
        return {"task": payload["task"], "item_id": item_id, "correct": False,
                "extracted": None, "detail": str(e)}
    except (KeyError, ValueError) as e:
        return {"http_status": 400, "error": str(e).strip("'\"")}
    return {"task": payload["task"], "item_id": item_id, "correct": res.correct,
            "extracted": res.extracted, "detail": res.detail}


def response_body(res: QueryResult, policy: str, correct: bool | None) -> dict:
    """``POST /v1/queries``' answer to one finished query (with ``http_status``: 503 when a
    replica was overloaded): the answer and its grade, latency, the plan, every agent call and
    what the execution controller did."""
    q = res.query
    return {
        "http_status": 503 if res.status is RequestStatus.OVERLOADED else 200,
        "query_id": q.query_id, "task": q.task,
        "item_id": q.item_id, "status": res.status.api,
        "answer": res.answer, "text": res.text, "correct": correct,
        "latency_s": round(res.latency, 4), "budget_s": q.budget_s,
        "within_budget": res.within_budget, "policy": policy,
        "plan": {"topology": res.plan.topology.value, "k": res.plan.k,
                 "roles": list(res.plan.roles),
                 "critical_path": build_graph(res.plan).critical_path_len},
        "steps": [{"node": s.node_id, "role": s.role, "kind": s.kind, "model": s.model,
                   "strategy": s.strategy.value, "status": s.status.api,
                   "start_s": round(s.start - q.arrival_s, 4),
                   "end_s": round(s.end - q.arrival_s, 4),
                   "prompt_tokens": s.prompt_tokens,
                   "output_tokens": s.output_tokens,
                   "degraded_from": s.degraded_from,
                   "given_up_start_s": (None if s.given_up_start is None
                                        else round(s.given_up_start - q.arrival_s, 4))}
                  for s in res.steps],
        "controller": {"stopped_early": res.stopped_early, "cancelled": list(res.cancelled),
                       "cancelled_calls": list(res.cancelled_calls),
                       "answer_from": list(res.answer_from),
                       "decisions": [{"node": d.node_id, "delta": _finite(d.delta),
                                      "stop": d.stop} for d in res.decisions]},
    }


def _finite(x: float) -> float | None:
    """A controller delta for JSON: rounded, or None where it was not asked (no answer yet:
    -inf), which JSON cannot carry."""
    return round(x, 5) if math.isfinite(x) else None
