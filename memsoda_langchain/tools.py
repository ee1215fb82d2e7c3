"""`memory_tools`: an agent's long-term memory as LangChain tools (recall, save, correct, end).

The recall tool shows every fact with its id and dates, so the model can correct or end one by id;
the write tools go through memsoda's write rules (duplicates resolve, single-valued relations hold
one value) and, when an extractor is configured, `save_memory` learns from a sentence through
`remember`. A memsoda error (a bad id, a fact that has ended, invalid input) comes back to the
model as the tool's answer, so it can try again; nothing is written then.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from memsoda_core import AsyncMemory, Memory, MemsodaError, RecallResult
from memsoda_core.adapting import call_async, call_sync
from memsoda_core.limits import MAX_K
from memsoda_core.recall.render import validity

RECALL = "recall_memory"
SAVE = "save_memory"
CORRECT = "correct_memory"
END = "end_memory"


def render_facts(result: RecallResult) -> str:
    """One line per recalled fact: `[id] subject predicate object (valid from – to)`."""
    if not result.facts:
        return "Nothing in memory matches."
    lines = [f"[{s.fact.id}] {s.fact.text} (valid {validity(s.fact)})" for s in result.facts]
    return "Facts in memory (id in brackets):\n" + "\n".join(lines)


class _Calls:
    """The tools' bodies, each in a sync and an async form over one memsoda call."""

    def __init__(self, memory: Memory | AsyncMemory, scope: dict[str, str], k: int, extractor: Any) -> None:
        self.memory, self.scope, self.k, self.extractor = memory, scope, k, extractor

    def _recall_args(self, query: str, k: int | None, as_of: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        facts = min(max(1, k or self.k), MAX_K)
        return (query,), {**self.scope, "facts_in_context": facts, "as_of": as_of}

    def _save(self, text: str | None, subject: str | None, predicate: str | None, obj: str | None) -> tuple[str, Any]:
        if subject and predicate and obj:
            fact = {"subject": subject, "predicate": predicate, "object": obj, "source_quote": text}
            return "add_facts", [fact]
        if text and self.extractor is not None:
            return "remember", [{"role": "user", "content": text}]
        raise ToolException("give subject, predicate and object (no extractor is configured to read a sentence)")

    @staticmethod
    def _saved(method: str, reply: Any) -> str:
        ids = list(reply) if method == "add_facts" else [*reply.added, *(new for _, new in reply.superseded)]
        return f"Saved as fact(s) {', '.join(map(str, ids))}." if ids else "Nothing new to save."

    def _correct(self, fact_id: int, subject: str, predicate: str, obj: str, valid_at: str | None) -> tuple[Any, ...]:
        return (fact_id, {"subject": subject, "predicate": predicate, "object": obj, "valid_at": valid_at})

    def sync(self) -> dict[str, Callable[..., str]]:
        def recall(query: str, k: int | None = None, as_of: str | None = None) -> str:
            args, kwargs = self._recall_args(query, k, as_of)
            return render_facts(_guard(call_sync, self.memory, "recall", *args, **kwargs))

        def save(
            text: str | None = None, subject: str | None = None, predicate: str | None = None, object: str | None = None
        ) -> str:
            method, payload = self._save(text, subject, predicate, object)
            extra = {"extractor": self.extractor} if method == "remember" else {}
            return self._saved(method, _guard(call_sync, self.memory, method, payload, **self.scope, **extra))

        def correct(
            fact_id: int,
            subject: str,
            predicate: str,
            object: str,
            valid_at: str | None = None,
        ) -> str:
            new = _guard(
                call_sync,
                self.memory,
                "supersede",
                *self._correct(fact_id, subject, predicate, object, valid_at),
                **self.scope,
            )
            return f"Fact {fact_id} is replaced by fact {new}."

        def end(fact_id: int, ended_at: str | None = None) -> str:
            _guard(call_sync, self.memory, "invalidate", fact_id, **self.scope, at=ended_at)
            return f"Fact {fact_id} has ended."

        return {RECALL: recall, SAVE: save, CORRECT: correct, END: end}

    def coroutines(self) -> dict[str, Callable[..., Coroutine[Any, Any, str]]]:
        async def recall(query: str, k: int | None = None, as_of: str | None = None) -> str:
            args, kwargs = self._recall_args(query, k, as_of)
            return render_facts(await _aguard(call_async(self.memory, "recall", *args, **kwargs)))

        async def save(
            text: str | None = None, subject: str | None = None, predicate: str | None = None, object: str | None = None
        ) -> str:
            method, payload = self._save(text, subject, predicate, object)
            extra = {"extractor": self.extractor} if method == "remember" else {}
            reply = await _aguard(call_async(self.memory, method, payload, **self.scope, **extra))
            return self._saved(method, reply)

        async def correct(
            fact_id: int,
            subject: str,
            predicate: str,
            object: str,
            valid_at: str | None = None,
        ) -> str:
            args = self._correct(fact_id, subject, predicate, object, valid_at)
            new = await _aguard(call_async(self.memory, "supersede", *args, **self.scope))
            return f"Fact {fact_id} is replaced by fact {new}."

        async def end(fact_id: int, ended_at: str | None = None) -> str:
            await _aguard(call_async(self.memory, "invalidate", fact_id, **self.scope, at=ended_at))
            return f"Fact {fact_id} has ended."

        return {RECALL: recall, SAVE: save, CORRECT: correct, END: end}


def _guard(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except MemsodaError as exc:
        raise ToolException(f"{type(exc).__name__}: {exc}") from exc


async def _aguard(pending: Coroutine[Any, Any, Any]) -> Any:
    try:
        return await pending
    except MemsodaError as exc:
        raise ToolException(f"{type(exc).__name__}: {exc}") from exc


DESCRIPTIONS = {
    RECALL: "Look up long-term facts about the user. query: what to look for; k: how many facts; as_of: an "
    "ISO date to ask what was true then. Shows each fact's id and dates.",
    SAVE: "Save a fact to long-term memory: subject, predicate and object (the user is 'user'), or a sentence as text.",
    CORRECT: "Replace fact fact_id (an id shown by recall_memory) by a corrected fact; valid_at: when the new "
    "value became true (ISO date), if known.",
    END: "Mark fact fact_id (an id shown by recall_memory) as no longer true; ended_at: when (ISO date), if known.",
}


def memory_tools(
    memory: Memory | AsyncMemory,
    *,
    dataset: str,
    project: str,
    k: int = 8,
    extractor: Any = None,
) -> list[BaseTool]:
    """The four memory tools of one scope for a LangChain or LangGraph agent: `recall_memory`,
    `save_memory`, `correct_memory`, `end_memory`. `extractor` (or the one `memory` was opened
    with) lets `save_memory` take a sentence. Sync and async calls both work with a `Memory`;
    an `AsyncMemory` serves async calls only."""
    calls = _Calls(memory, {"dataset": dataset, "project": project}, k, extractor)
    if calls.extractor is None:
        calls.extractor = getattr(memory, "_extractor", None)
    sync, coroutines = calls.sync(), calls.coroutines()
    return [
        StructuredTool.from_function(
            func=sync[name],
            coroutine=coroutines[name],
            name=name,
            description=DESCRIPTIONS[name],
            handle_tool_error=True,
        )
        for name in (RECALL, SAVE, CORRECT, END)
    ]
