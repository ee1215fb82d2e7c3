"""`memory_tools`: an agent's long-term memory as LangChain tools (recall, save, correct, end).

The recall tool shows every fact with its id and dates, so the model can correct or end one by id;
the write tools go through memsoda's write rules (duplicates resolve, single-valued relations hold
one value) and, when an extractor is configured, `save_memory` learns from a sentence through
`remember`. A memsoda error (a bad id, a fact that has ended, invalid input such as k=0) comes
back to the model as the tool's answer, so it can try again; nothing is written then. Whose memory
(a fixed `dataset`, or `dataset_from`, read from each run's config) is not the model's to choose:
a run that names no user raises `ScopeError` from the agent's invoke instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from memsoda_core import AsyncMemory, ExtractorLike, Memory, MemsodaError, RecallResult
from memsoda_core.adapting import RunScope, call_async, call_sync, check_adapter_arguments
from memsoda_core.fact_text import validity

RECALL = "recall_memory"
SAVE = "save_memory"
CORRECT = "correct_memory"
END = "end_memory"


def render_facts(result: RecallResult) -> str:
    """One line per recalled fact: `[id] subject predicate object (valid from – to)`."""
    if result.scope_empty:
        return "This user's memory holds no facts yet."
    if not result.facts:
        return "Nothing in memory matches."
    lines = [f"[{s.fact.id}] {s.fact.text} (valid {validity(s.fact)})" for s in result.facts]
    return "Facts in memory (id in brackets):\n" + "\n".join(lines)


@dataclass(frozen=True)
class _Call:
    """One tool call as the memsoda call it makes and how its reply reads to the model."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: Callable[[Any], str]


class _Plans:
    """What each tool does, once: its arguments (the tool's schema, read from the signature) ->
    the memsoda call. `_sync_tool` and `_async_tool` run the same plan, so the two cannot drift.
    `config` is the run's, which LangChain passes to a parameter typed `RunnableConfig` and keeps
    out of the schema: the scope comes from it, never from the model."""

    def __init__(self, scope: RunScope, k: int, extractor: ExtractorLike | None) -> None:
        self.scope, self.k, self.extractor = scope, k, extractor

    def _of(self, config: RunnableConfig) -> dict[str, str]:
        return self.scope.resolve(config.get("configurable"))

    def recall(self, query: str, k: int | None = None, as_of: str | None = None, *, config: RunnableConfig) -> _Call:
        # a k out of range (0, negative, over the maximum) is recall's LimitError, shown to the model
        facts = self.k if k is None else k
        return _Call("recall", (query,), {**self._of(config), "facts_in_context": facts, "as_of": as_of}, render_facts)

    def save(
        self,
        text: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        *,
        config: RunnableConfig,
    ) -> _Call:
        scope = self._of(config)
        if subject and predicate and object:
            fact = {"subject": subject, "predicate": predicate, "object": object, "source_quote": text}
            return _Call("add_facts", ([fact],), scope, _saved)
        if text and self.extractor is not None:
            window = [{"role": "user", "content": text}]
            return _Call("remember", (window,), {**scope, "extractor": self.extractor}, _remembered)
        raise ToolException("give subject, predicate and object (no extractor is configured to read a sentence)")

    def correct(
        self,
        fact_id: int,
        subject: str,
        predicate: str,
        object: str,
        valid_at: str | None = None,
        *,
        config: RunnableConfig,
    ) -> _Call:
        new = {"subject": subject, "predicate": predicate, "object": object, "valid_at": valid_at}
        return _Call(
            "supersede", (fact_id, new), self._of(config), lambda by: f"Fact {fact_id} is replaced by fact {by}."
        )

    def end(self, fact_id: int, ended_at: str | None = None, *, config: RunnableConfig) -> _Call:
        return _Call(
            "invalidate", (fact_id,), {**self._of(config), "at": ended_at}, lambda _: f"Fact {fact_id} has ended."
        )


def _saved(ids: Any) -> str:
    return f"Saved as fact(s) {', '.join(map(str, ids))}." if ids else "Nothing new to save."


def _remembered(result: Any) -> str:
    return _saved([*result.added, *(new for _, new in result.superseded)])


def _sync_tool(memory: Memory | AsyncMemory, plan: Callable[..., _Call]) -> Callable[..., str]:
    @functools.wraps(plan)
    def run(*args: Any, **kwargs: Any) -> str:
        call = plan(*args, **kwargs)
        return call.reply(_guard(call_sync, memory, call.method, *call.args, **call.kwargs))

    return run


def _async_tool(memory: Memory | AsyncMemory, plan: Callable[..., _Call]) -> Callable[..., Coroutine[Any, Any, str]]:
    @functools.wraps(plan)
    async def run(*args: Any, **kwargs: Any) -> str:
        call = plan(*args, **kwargs)
        return call.reply(await _aguard(call_async(memory, call.method, *call.args, **call.kwargs)))

    return run


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
    project: str,
    dataset: str | None = None,
    dataset_from: str | None = None,
    k: int = 8,
    extractor: ExtractorLike | None = None,
) -> list[BaseTool]:
    """The four memory tools for a LangChain or LangGraph agent: `recall_memory`, `save_memory`,
    `correct_memory`, `end_memory`. Whose memory: `dataset="alice"` fixes it; `dataset_from="user_id"`
    reads it from each run's `config["configurable"]["user_id"]`, so one agent serves many users
    (a run without it raises `ScopeError`). `k`: facts a recall shows when the model gives none.
    `extractor` (or the one `memory` was opened with) lets `save_memory` take a sentence. Sync and
    async calls both work with a `Memory`; an `AsyncMemory` serves async calls only."""
    check_adapter_arguments(memory, adapter="memory_tools", k=k)  # LimitError for a bad k
    chosen = extractor if extractor is not None else memory._context.extractor
    plans = _Plans(RunScope(project, dataset, dataset_from), k, chosen)
    by_name: dict[str, Callable[..., _Call]] = {
        RECALL: plans.recall,
        SAVE: plans.save,
        CORRECT: plans.correct,
        END: plans.end,
    }
    return [
        StructuredTool.from_function(
            func=_sync_tool(memory, plan),
            coroutine=_async_tool(memory, plan),
            name=name,
            description=DESCRIPTIONS[name],
            handle_tool_error=True,
        )
        for name, plan in by_name.items()
    ]
