"""Drive an operation with scripted replies, no database and no model (the fast tier).

An operation is a generator of requests (`memsoda_core.runner.steps`); `drive` answers each with
what a rule gives and records the conversation, the way h11 tests its protocol with bytes alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from memsoda_core.runner.steps import (
    Concurrently,
    EmbedDocuments,
    EmbedQuery,
    Execute,
    Operation,
    ReadAside,
    Request,
    Statement,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Throw:
    """A reply that is an error, thrown into the operation (as the runner does for embedders)."""

    error: BaseException


Answer = Callable[[Request], Any]


@dataclass
class Conversation:
    """Every request an operation made, in order, and what it returned."""

    requests: list[Request] = field(default_factory=list)
    result: Any = None

    def statements(self) -> list[Statement]:
        return [r.statement for r in self.requests if isinstance(r, Execute | ReadAside)]

    def index(self, kind: type, statement: Statement | None = None) -> int:
        """Position of the first request of `kind` (running `statement`, when given); -1 if none."""
        for position, request in enumerate(self.requests):
            if isinstance(request, kind) and (statement is None or getattr(request, "statement", None) == statement):
                return position
        return -1


def drive(op: Operation[T], answer: Answer, *, limit: int = 1000) -> Conversation:
    """Run `op` to its end, answering every request with `answer(request)` (a `Throw` is thrown in)."""
    conversation = Conversation()
    reply: Any = None
    error: BaseException | None = None
    for _ in range(limit):
        try:
            request = op.throw(error) if error is not None else op.send(reply)
        except StopIteration as stop:
            conversation.result = stop.value
            return conversation
        conversation.requests.append(request)
        out = answer(request)
        reply, error = (None, out.error) if isinstance(out, Throw) else (out, None)
    raise AssertionError(f"the operation made more than {limit} requests")


@dataclass
class Script:
    """Answers by statement: `on(statement, reply)` for statements, vectors for embedding requests,
    and `default` for any other statement (no rows)."""

    dimensions: int = 4
    rules: list[tuple[Statement, Callable[[Request], Any]]] = field(default_factory=list)
    embed_error: BaseException | None = None
    default: Any = field(default_factory=list)

    def on(self, statement: Statement, reply: Callable[[Request], Any] | Any) -> Script:
        self.rules.append((statement, reply if callable(reply) else _constant(reply)))
        return self

    def __call__(self, request: Request) -> Any:
        if isinstance(request, EmbedDocuments | EmbedQuery):
            if self.embed_error is not None:
                return Throw(self.embed_error)
            count = len(request.texts) if isinstance(request, EmbedDocuments) else 1
            vectors = [np.full(self.dimensions, 0.5, dtype=np.float32) for _ in range(count)]
            return vectors if isinstance(request, EmbedDocuments) else vectors[0]
        if isinstance(request, Concurrently):
            return [self(statement) for statement in request.statements]
        statement = getattr(request, "statement", None)
        for known, reply in self.rules:
            if statement == known:
                return reply(request)
        return self.default


def _constant(value: Any) -> Callable[[Request], Any]:
    """A rule that answers every request with `value`."""
    return lambda _request: value


def params_of(request: Request) -> dict[str, Any]:
    params = getattr(request, "params", None)
    assert isinstance(params, dict), request
    return params


def names(rows: Sequence[tuple[str, int]]) -> list[str]:
    return [name for name, _ in rows]
