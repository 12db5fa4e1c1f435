"""The program-level schedulers on the wall clock: the hand-built set of programs
(``programs.py``) sent to real Ray Serve replicas (the twin engine, one slot) ends in exactly the
order, with the same admission outcomes, as in the twin, under PLAS and under ATLAS."""

from __future__ import annotations

import asyncio
import time

import pytest
import ray
from programs import BLOCKER, CALLS, EXPECTED, pool_config, run_in_twin
from ray import serve
from ray.serve.api import RunTarget

from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.serving.replica import NAMESPACE, ModelReplica

ORDERS = ("plas", "atlas")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One Serve app per order, each one deployment of the test pool's 1-slot model."""
    cfg = pool_config(tmp_path_factory.mktemp("pool"))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    serve.start(http_options={"port": cfg.serving.port})
    model = cfg.models[0]
    apps = []
    for order in ORDERS:
        pool = cfg.model_copy(update={"engine": cfg.engine.model_copy(
            update={"scheduling": order})})
        apps.append(RunTarget(ModelReplica.options(name=f"model:{order}").bind(
            model.model_dump(), pool.model_dump()), name=f"sched-{order}", route_prefix=None))
    serve.run_many(apps)  # both apps start together
    yield cfg
    for order in ORDERS:
        serve.delete(f"sched-{order}")
    if started:
        serve.shutdown()
        ray.shutdown()


async def _send(order: str) -> list[str]:
    """The set on the wall clock, each call sent at its offset: 'name:status' as they end."""
    h = serve.get_deployment_handle(f"model:{order}", f"sched-{order}")
    await h.generate.remote(GenerateRequest("warm", "p", 1, time.time() + 30))
    ended: list[str] = []
    t0 = time.time()

    async def one(name, at, strategy, tokens, deadline_in, attained, path) -> None:  # noqa: ANN001
        await asyncio.sleep(max(0.0, t0 + at - time.time()))
        req = GenerateRequest(name, "p", tokens, time.time() + deadline_in, strategy=strategy,
                              prompt_tokens_hint=50, query_id=name, attained_s=attained,
                              critical_path_s=path)
        res = await h.generate.remote(req)
        ended.append(f"{name}:{res.status.api}")

    await asyncio.gather(*(one(*c) for c in (BLOCKER, *CALLS)))
    return ended


@pytest.mark.parametrize("order", ORDERS)
def test_same_admission_and_order_in_the_twin_and_on_serve(served, order):
    """Exact order and outcomes on Serve, equal to the twin's (and to the expected list)."""
    on_serve = asyncio.run(_send(order))
    assert on_serve == run_in_twin(served, order) == EXPECTED[order], on_serve
