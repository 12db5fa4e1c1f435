"""The OpenAI-compatible remote engine against a real streaming HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from inframind_ray.config import OpenAIEngineSpec
from inframind_ray.serving.engines.base import GenerateRequest
from inframind_ray.serving.engines.openai_remote import OpenAIEngine


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    prompt = body["messages"][-1]["content"]
    if prompt == "busy":
        return web.json_response({"error": "busy"}, status=429)
    if prompt == "boom":
        return web.json_response({"error": "boom"}, status=500)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(0.05)  # time to first token
    for i in range(body["max_tokens"]):
        chunk = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await asyncio.sleep(0.01)
    await resp.write(b"data: [DONE]\n\n")
    return resp


def test_remote_engine_signals_and_errors():
    """Streamed TTFT/latency, in-flight count, 429 -> overloaded, 500 -> error, deadline."""

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", _chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        eng = OpenAIEngine(OpenAIEngineSpec(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
        await eng.start()
        try:
            task = asyncio.create_task(eng.generate(GenerateRequest("a", "hi", 10,
                                                                    time.time() + 10)))
            await asyncio.sleep(0.03)
            assert eng.stats().running == 1
            res = await task
            assert res.status.api == "ok" and res.output_tokens == 10 and res.text.startswith("t0")
            assert 0.04 < res.ttft_s < res.latency_s
            s = eng.stats()
            assert s.running == 0 and s.ttft_s > 0 and 0.005 < s.tpot_s < 0.05
            busy = await eng.generate(GenerateRequest("b", "busy", 5, time.time() + 10))
            boom = await eng.generate(GenerateRequest("c", "boom", 5, time.time() + 10))
            late = await eng.generate(GenerateRequest("d", "slow", 100, time.time() + 0.2))
            assert (busy.status.api, boom.status.api, late.status.api) == (
                "overloaded", "error", "deadline")
            assert eng.diagnostics()["error_rate"] > 0
        finally:
            await eng.shutdown()
            await runner.cleanup()

    asyncio.run(main())
