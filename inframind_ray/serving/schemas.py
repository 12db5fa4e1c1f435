"""The HTTP API's request bodies (pydantic), with the rules the service enforces written into
their JSON Schema, so that the OpenAPI document says what is refused (schemathesis checks it).

No ``from __future__ import annotations`` here: FastAPI must see the real body classes through
Serve's method wrappers.
"""

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from inframind_ray.grading.numeric import parse_number
from inframind_ray.serving.chat import (
    MAX_QUERY_CHARS,
    USER_SAYS_SOMETHING,
    ChatMessage,
    StreamOptions,
)
from inframind_ray.tasks.registry import CODE_FAMILIES, FAMILIES

Task = Literal[(*FAMILIES, "free")]  # a benchmark family, or free text
MAX_ANSWER_CHARS = 50_000


def _item_id(v: object) -> object:
    """JSON Schema's integer: an int or an integral float (``5.0``); never a bool or a string."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or (v is not None and not isinstance(v, int)):
        raise ValueError("must be an integer")
    return v


ItemId = Annotated[int | None, BeforeValidator(_item_id)]
_INT = {"type": "integer"}
_STR = {"type": "string"}


def _has(**props: dict) -> dict:
    """JSON Schema: these properties are present with these types (not null)."""
    return {"required": list(props), "properties": props}


def _task_in(names) -> dict:  # noqa: ANN001
    return _has(task={"enum": list(names)})


_NUMERIC_REFERENCE = {"properties": {"reference": {"pattern": "[0-9]"}}}  # GSM8K compares numbers
LEARNED = "inframind"  # the learned policy's name (policy.learned.LearnedPolicy.name)

QUERY_RULES = {
    "anyOf": [_has(item_id=_INT), _has(query={**_STR, "pattern": r"\S"})],
    "allOf": [
        {"if": _task_in(FAMILIES), "then": {"anyOf": [_has(item_id=_INT), _has(reference=_STR)]}},
        {"if": _task_in(["free"]), "then": {"not": _has(item_id=_INT)}},
        {"not": _has(reference=_STR, item_id=_INT)},
        {"if": _task_in(CODE_FAMILIES), "then": {"not": _has(reference=_STR)}},
        {"if": _task_in(["gsm8k"]), "then": _NUMERIC_REFERENCE},
        {"not": _has(policy_version=_STR, policy={**_STR, "not": {"const": LEARNED}})},
    ],
}
"""The cross-field rules of ``QueryRequest``'s validator, in its JSON Schema (the OpenAPI
document says what the service enforces)."""

GRADE_RULES = {
    "oneOf": [_has(item_id=_INT), _has(reference=_STR)],
    "allOf": [{"if": _task_in(["free"]), "then": {"not": _has(item_id=_INT)}},
              {"if": _task_in(CODE_FAMILIES), "then": {"not": _has(reference=_STR)}},
              {"if": _task_in(["gsm8k"]), "then": _NUMERIC_REFERENCE}],
}


def _numeric_reference(task: str | None, reference: str | None) -> None:
    """A GSM8K reference must hold a number (its grader compares numbers)."""
    if task == "gsm8k" and reference is not None and parse_number(reference) is None:
        raise ValueError("a gsm8k reference must contain a number")


VERSION_PATTERN = r"^v[0-9]{4,}$"


class QueryRequest(BaseModel):
    """POST /v1/queries."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=QUERY_RULES)
    query: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    item_id: ItemId = Field(None, ge=0,
                                description="item id within `task` (graded)")
    budget_s: float = Field(60.0, gt=0, description="latency budget in seconds")
    task: Task | None = Field(None, description="task family of item_id (default mmlu_pro), or "
                              "of a free-text query's reference answer")
    reference: str | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS,
                                  description="grade a free-text query against this answer")
    policy: str | None = None
    controller: Literal["on", "off"] | None = Field(
        None, description="the run-time execution controller for this query (default: the "
        "deployment's `serving.controller`)")
    query_id: str | None = Field(None, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    policy_version: str | None = Field(
        None, pattern=VERSION_PATTERN, description="serve this query with this registry version "
        "of the learned policy (side-by-side evaluation of two versions on the same traffic; "
        "never canaried); `policy` must then be inframind or unset (404: no such version, 409: "
        "it cannot serve this pool)")

    @model_validator(mode="after")
    def _need_something(self) -> "QueryRequest":
        if self.item_id is None and not (self.query or "").strip():
            raise ValueError("give a non-empty query or an item_id")
        if self.task not in (None, "free") and self.item_id is None and self.reference is None:
            raise ValueError(f"task {self.task} needs an item_id (or a query with a reference)")
        if self.item_id is not None and self.task == "free":
            raise ValueError("task free takes no item_id")
        if self.reference is not None and self.item_id is not None:
            raise ValueError("give a reference or an item_id, not both")
        if self.reference is not None and self.task in CODE_FAMILIES:
            raise ValueError(f"grading free-text {self.task} code needs an item's tests: give "
                             "its item_id instead of a reference")
        _numeric_reference(self.task, self.reference)
        if self.policy_version is not None and self.policy not in (None, LEARNED):
            raise ValueError(f"policy_version applies to the learned policy ({LEARNED}) only, "
                             f"not {self.policy}")
        return self


class GradeRequest(BaseModel):
    """POST /v1/grade: grade an answer to a benchmark item with the family's real grader."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=GRADE_RULES)
    task: Task = Field(description="task family")
    item_id: ItemId = Field(None, ge=0)
    answer: str = Field(max_length=MAX_ANSWER_CHARS, description="a response or a program")
    reference: str | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS)

    @model_validator(mode="after")
    def _item_or_reference(self) -> "GradeRequest":
        if (self.item_id is None) == (self.reference is None):
            raise ValueError("give exactly one of item_id and reference")
        if self.item_id is not None and self.task == "free":
            raise ValueError("task free takes no item_id")
        if self.reference is not None and self.task in CODE_FAMILIES:
            raise ValueError(f"grading {self.task} code needs an item's tests: give its item_id")
        _numeric_reference(self.task, self.reference)
        return self


class ChatRequest(BaseModel):
    """POST /v1/chat/completions (OpenAI-compatible: the whole message history, ``stream``
    with ``stream_options.include_usage``; other OpenAI fields are accepted and ignored, the
    policy chooses models and lengths; ``budget_s`` and the grading fields are extras)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"allOf": QUERY_RULES["allOf"]})
    model: str = "inframind"
    messages: list[ChatMessage] = Field(min_length=1, max_length=256,
                                        json_schema_extra={"contains": USER_SAYS_SOMETHING})
    stream: bool = False
    stream_options: StreamOptions | None = None
    budget_s: float = Field(60.0, gt=0)
    item_id: ItemId = Field(None, ge=0)
    task: Task | None = None
    reference: str | None = Field(None, min_length=1, max_length=MAX_QUERY_CHARS)
    policy: str | None = None


def _number(v: object) -> object:
    """JSON Schema's number: an int or a float; never a bool (``false`` is not 0.0)."""
    if isinstance(v, bool):
        raise ValueError("must be a number")
    return v


Score = Annotated[float, BeforeValidator(_number)]


class FeedbackRequest(BaseModel):
    """POST /v1/feedback: a client's score of a served query's answer (a reward of the
    continual learner, docs/continual.md)."""

    model_config = ConfigDict(extra="forbid")
    query_id: str = Field(max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                          description="the query_id of a recent answer")
    score: Score = Field(ge=0, le=1, allow_inf_nan=False,
                         description="0 (useless) to 1 (right and useful)")


class PolicyVersionRequest(BaseModel):
    """POST /v1/policies/pin: a version, or ``{}`` for the active one."""

    model_config = ConfigDict(extra="forbid")
    version: str | None = Field(None, pattern=VERSION_PATTERN,
                                description="e.g. v0002 (default: the active version)")


class PolicyVersionRequired(BaseModel):
    """POST /v1/policies/promote and /canary: the version to promote or canary."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=VERSION_PATTERN, description="e.g. v0002")
