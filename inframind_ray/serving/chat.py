"""The OpenAI-compatible chat surface: the conversation turned into one query text, and the
orchestrator's answer as a ``chat.completion`` or as a stream of ``chat.completion.chunk``
server-sent events.

A multi-agent plan's answer exists only when its last node (the aggregator, or the single agent)
finishes, so a stream sends the assistant role at once, an SSE comment every
``KEEPALIVE_S`` while the query runs (clients and proxies see a live connection; SSE clients
ignore comments), then the answer's text, the finish reason and, when asked with
``stream_options.include_usage``, the token usage. An error after the stream began is an
``error`` event, which the official client raises as an ``APIError``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_QUERY_CHARS = 20_000
KEEPALIVE_S = 2.0
CHUNK_CHARS = 64  # the answer's text is sent in pieces of about this many characters
Role = Literal["system", "developer", "user", "assistant", "tool"]


class TextPart(BaseModel):
    """One text part of a message's content list."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_QUERY_CHARS)


class ChatMessage(BaseModel):
    """One OpenAI chat message (text content, as a string or a list of text parts)."""

    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[TextPart] = Field(max_length=MAX_QUERY_CHARS)

    def text(self) -> str:
        """The message's text."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    """``stream_options`` of a streaming request."""

    include_usage: bool = False


NONEMPTY = r"\S"
USER_SAYS_SOMETHING = {
    "required": ["role", "content"],
    "properties": {"role": {"const": "user"}, "content": {"anyOf": [
        {"type": "string", "pattern": NONEMPTY},
        {"type": "array", "contains": {"required": ["text"],
                                       "properties": {"text": {"type": "string",
                                                               "pattern": NONEMPTY}}}}]}},
}
"""JSON Schema of a user message with some text: ``messages`` must contain one."""


def conversation(messages: Sequence[ChatMessage]) -> str:
    """The query text of a conversation: a lone user message as it is, else a transcript
    (``Role: text`` per message, in order). Raises ``ValueError`` when no user message has
    text."""
    if not any(m.role == "user" and m.text().strip() for m in messages):
        raise ValueError("messages: need a user message with some text")
    if len(messages) == 1:
        return messages[0].text()
    return "\n\n".join(f"{m.role.capitalize()}: {m.text()}" for m in messages)


def usage(out: dict) -> dict[str, int]:
    """Token usage of an answered query: every agent call's prompt and output tokens."""
    prompt = sum(int(s.get("prompt_tokens", 0)) for s in out.get("steps", ()))
    completion = sum(int(s.get("output_tokens", 0)) for s in out.get("steps", ()))
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


EXTRAS = ("answer", "correct", "latency_s", "plan", "status", "within_budget", "query_id")


def completion(out: dict, model: str = "inframind") -> dict[str, Any]:
    """A ``chat.completion`` from the orchestrator's answer."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": out.get("text") or ""}}],
        "usage": usage(out),
        "inframind": {k: out[k] for k in EXTRAS if k in out},
    }


def _event(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def stream(answer: Awaitable[dict], include_usage: bool,
                 model: str = "inframind") -> AsyncIterator[bytes]:
    """SSE bytes of a streamed chat completion whose answer ``answer`` brings."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:16]}", int(time.time())

    def chunk(delta: dict, finish: str | None = None, **extra: Any) -> bytes:
        return _event({"id": cid, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [{"index": 0, "delta": delta,
                                                    "finish_reason": finish,
                                                    "logprobs": None}], **extra})

    yield chunk({"role": "assistant", "content": ""})
    task = asyncio.ensure_future(answer)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_S)
            if done:
                break
            yield b": keep-alive\n\n"
        out = task.result()
    finally:
        if not task.done():  # the client went away: stop waiting for it
            task.cancel()
    status = out.get("http_status", 200)
    if status >= 400:
        yield _event({"error": {"message": out.get("error", "error"), "type": "inframind_error",
                                "code": status}})
        yield b"data: [DONE]\n\n"
        return
    text = out.get("text") or ""
    for i in range(0, len(text), CHUNK_CHARS):
        yield chunk({"content": text[i:i + CHUNK_CHARS]})
    yield chunk({}, "stop", inframind={k: out[k] for k in EXTRAS if k in out})
    if include_usage:
        yield _event({"id": cid, "object": "chat.completion.chunk", "created": created,
                      "model": model, "choices": [], "usage": usage(out)})
    yield b"data: [DONE]\n\n"
