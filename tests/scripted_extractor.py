"""A scripted `Extractor` for tests: no model runs here, so the answers are given, and every
request it was handed is kept so a test can check what the extractor saw."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memsoda_core.learning import ExtractionRequest

Answer = Any
"""A mapping (as structured output returns), JSON text, or an exception to raise."""


def add(subject: str, predicate: str, obj: str, quote: str | None, **fields: Any) -> dict[str, Any]:
    """An add operation as a model would write it (every schema key present, nulls for unknowns; a
    model may leave out the quote too)."""
    fact: dict[str, Any] = {
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "subject_type": None,
        "object_type": None,
        "mentions": [],
        "valid_at": None,
        "invalid_at": None,
        "confidence": 1.0,
        "source_quote": quote,
    }
    fact.update(fields)
    return {"op": "add", "fact_id": None, "fact": fact, "ended_at": None, "source_quote": None}


def supersede(fact_id: int, subject: str, predicate: str, obj: str, quote: str, **fields: Any) -> dict[str, Any]:
    return {**add(subject, predicate, obj, quote, **fields), "op": "supersede", "fact_id": fact_id}


def end(fact_id: int, quote: str, ended_at: str | None = None) -> dict[str, Any]:
    return {"op": "end", "fact_id": fact_id, "fact": None, "ended_at": ended_at, "source_quote": quote}


def answer(*operations: Any, summary: str | None = None) -> dict[str, Any]:
    """A model's whole answer; an operation may be any JSON value (a test sends malformed ones too)."""
    return {"operations": list(operations), "summary": summary}


class ScriptedExtractor:
    """Answers from `script(request)` (or the given answers in turn); an exception is raised."""

    def __init__(self, *answers: Answer, script: Callable[[ExtractionRequest], Answer] | None = None) -> None:
        self._answers = list(answers)
        self._script = script
        self.requests: list[ExtractionRequest] = []

    def extract(self, request: ExtractionRequest) -> Any:
        self.requests.append(request)
        reply = self._script(request) if self._script is not None else self._answers.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def aextract(self, request: ExtractionRequest) -> Any:
        return self.extract(request)
