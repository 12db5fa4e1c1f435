"""Twin backend: agent calls become engine requests whose answers are the recorded answers."""

from __future__ import annotations

import asyncio
import itertools

from inframind_ray.core.request import EngineRequest
from inframind_ray.core.types import prompt_tokens as prompt_tokens_of
from inframind_ray.orchestration.runner import AgentCall, AgentResult
from inframind_ray.replica.load_view import Track, untracked
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import ModelReplicas


class TwinBackend:
    """Routes each call to a replica of its model (the shared replica choice) in the twin;
    ``track`` (the load view's ``LoadView.track``, as served) counts each call in the view
    while it is out."""

    def __init__(self, replicas: dict[str, ModelReplicas], outcome: OutcomeModel,
                 track: Track = untracked,
                 ) -> None:
        self.replicas = replicas
        self.outcome = outcome
        self.track = track
        self._ids = itertools.count()

    async def call(self, call: AgentCall) -> AgentResult:
        """Ask the outcome model what the agent says and how long it is, then let an engine
        generate that many tokens."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        q = call.query
        ups = [u for u in call.upstream if u.status.ok]
        text_ok, tokens = self.outcome.reply(q.item_id, call.model, call.strategy, call.node.kind,
                                             [u.answer for u in ups], call.max_tokens,
                                             call.sample, q.task, q.query_id)
        prompt_tokens = prompt_tokens_of(q, call.strategy, sum(u.output_tokens for u in ups))
        req = EngineRequest(f"{q.query_id}/{call.node.id}/{next(self._ids)}", prompt_tokens, tokens,
                            deadline=call.deadline, program=call.program)
        with self.track(call.model, call.deadline):
            res = await self.replicas[call.model].pick(req.deadline).generate(req)
        return AgentResult(
            node_id=call.node.id,
            role=call.node.role,
            kind=call.node.kind.value,
            model=call.model,
            strategy=call.strategy,
            status=res.status,
            text=text_ok if res.status.ok else None,
            start=start,
            end=res.finished_at,
            first_token=res.first_token,
            prompt_tokens=prompt_tokens,
            output_tokens=res.output_tokens,
            num_preemptions=res.num_preemptions,
            service_s=res.service_s,
            imposed_s=res.imposed_s,
        )
