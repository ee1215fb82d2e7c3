"""Framework-free helpers shared by the LangChain and LlamaIndex adapters: one way to call either
memory from sync or async code, whose memory a run reads (`RunScope`), stable ids, and the
metadata a context document carries."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memsoda_core.async_memory import AsyncMemory
from memsoda_core.checks import check_int
from memsoda_core.errors import ArgumentTypeError, ConfigurationError, ScopeError, ValidationError
from memsoda_core.memory import Memory
from memsoda_core.models import RecallResult, ScoredFact
from memsoda_core.recall.calls import INCLUDE_OPTIONS
from memsoda_core.recall.profile import MAX_FACTS
from memsoda_core.text import message_query
from memsoda_core.validation import check_scope


def framework_query(query: Any) -> Any:
    """A query a framework hands an adapter (a chat engine's or a chain's user message, a memory
    manager's window of messages): a string cut as a chat message is (`text.message_query`), so one
    over recall's limit is recalled by its head, as the frameworks' own retrievers and stores embed
    the head of any; anything else as given, for recall's checks to refuse."""
    return message_query(query) if isinstance(query, str) else query


def recall_sync(memory: Memory | AsyncMemory, query: str | None, **kwargs: Any) -> RecallResult:
    """`memory.recall` from synchronous code. An AsyncMemory's pool lives on its event loop, so it
    is refused with a message saying what to do instead."""
    if isinstance(memory, AsyncMemory):
        raise ConfigurationError(
            "this retriever wraps an AsyncMemory: call its async method (ainvoke / aretrieve), "
            "or give it a Memory for synchronous calls"
        )
    return memory.recall(query, **kwargs)


async def recall_async(memory: Memory | AsyncMemory, query: str | None, **kwargs: Any) -> RecallResult:
    """`memory.recall` from async code: awaited on an AsyncMemory, in a worker thread for a Memory."""
    if isinstance(memory, AsyncMemory):
        return await memory.recall(query, **kwargs)
    return await asyncio.to_thread(memory.recall, query, **kwargs)


def call_sync(memory: Memory | AsyncMemory, method: str, *args: Any, **kwargs: Any) -> Any:
    """`memory.<method>(...)` from synchronous code (an AsyncMemory is refused, as by `recall_sync`)."""
    if isinstance(memory, AsyncMemory):
        raise ConfigurationError(
            "this wraps an AsyncMemory: call its async form (ainvoke / aget / aput), or give it a Memory"
        )
    return getattr(memory, method)(*args, **kwargs)


async def call_async(memory: Memory | AsyncMemory, method: str, *args: Any, **kwargs: Any) -> Any:
    """`memory.<method>(...)` from async code: awaited on an AsyncMemory, in a thread for a Memory."""
    if isinstance(memory, AsyncMemory):
        return await getattr(memory, method)(*args, **kwargs)
    return await asyncio.to_thread(getattr(memory, method), *args, **kwargs)


def check_adapter_arguments(memory: Any, *, adapter: str, **arguments: Any) -> dict[str, Any]:
    """An adapter's constructor arguments checked as memsoda checks them, so a bad one raises the
    same documented error from every adapter (never a framework's own validation error): `memory`
    not a Memory or AsyncMemory, `mode` not "context" / "facts": `ConfigurationError`; `k` (facts in
    a recall) and `max_facts` (a profile's) outside their range: `LimitError`, not an int:
    `ArgumentTypeError`; `include` not strings: `ArgumentTypeError`, an unknown one:
    `ValidationError`. Only the arguments given are checked; returns them, `include` as a tuple."""
    if not isinstance(memory, Memory | AsyncMemory):
        raise ConfigurationError(f"{adapter} needs a memsoda Memory or AsyncMemory, got {type(memory).__name__}")
    checked = dict(arguments)
    if "mode" in arguments and arguments["mode"] not in ("context", "facts"):
        raise ConfigurationError(f"mode must be 'context' or 'facts', got {arguments['mode']!r}")
    if "k" in arguments:
        memory.options.with_overrides({"facts_in_context": arguments["k"]})  # LimitError, ArgumentTypeError
    for name in ("max_facts", "profile_max_facts"):
        if name in arguments:
            check_int(arguments[name], name, low=1, high=MAX_FACTS)
    if "include" in arguments:
        checked["include"] = _checked_include(arguments["include"])
    return checked


def _checked_include(include: Any) -> tuple[str, ...]:
    """recall's `include` (one name or several) as a tuple, each a known option."""
    chosen = (include,) if isinstance(include, str) else include
    if not isinstance(chosen, Iterable) or isinstance(chosen, Mapping):
        raise ArgumentTypeError(f"include must be a list of option names, got {type(include).__name__}")
    names = tuple(chosen)
    if not all(isinstance(name, str) for name in names):
        raise ArgumentTypeError(f"include must hold option names (strings), got {names!r}")
    unknown = sorted(set(names) - INCLUDE_OPTIONS)
    if unknown:
        raise ValidationError(f"unknown include option(s) {unknown}; use any of {sorted(INCLUDE_OPTIONS)}")
    return names


@dataclass(frozen=True)
class RunScope:
    """Whose memory an adapter reads and writes: a fixed `dataset`, or `dataset_from`, the key of a
    run's configuration (LangChain's `config["configurable"]`) whose value is the dataset, so one
    agent serves many users. Exactly one of the two; `project` is always given. A run without that
    key raises `ScopeError`: falling back to some other dataset would show one user another's facts.
    """

    project: str
    dataset: str | None = None
    dataset_from: str | None = None

    def __post_init__(self) -> None:
        if self.dataset is not None and self.dataset_from is not None:
            raise ConfigurationError("pass dataset='...' (one user's memory) or dataset_from='...', not both")
        if self.dataset_from is None:
            if self.dataset is None:
                raise ScopeError(
                    "dataset is required: pass dataset='...' (one user's memory) or dataset_from='user_id' "
                    "(the user each run names in config['configurable'])"
                )
            check_scope(self.dataset, self.project)
            return
        if not isinstance(self.dataset_from, str) or not self.dataset_from.strip():
            raise ConfigurationError(
                f"dataset_from must name a configurable key such as 'user_id', got {self.dataset_from!r}"
            )
        check_scope("-", self.project)  # the project alone: each run names its dataset

    def resolve(self, configurable: Mapping[str, Any] | None) -> dict[str, str]:
        """The scope (dataset, project keywords) of one run, given its configurable values."""
        if self.dataset is not None:
            return {"dataset": self.dataset, "project": self.project}
        key = str(self.dataset_from)
        value = (configurable or {}).get(key)
        if value is None:
            shown = sorted(k for k in (configurable or {}) if isinstance(k, str) and not k.startswith("__"))
            raise ScopeError(
                f"this run names no user: dataset_from={key!r} reads config['configurable'][{key!r}], which it "
                f"does not set (its keys: {shown}); invoke with config={{'configurable': {{{key!r}: '...'}}}}"
            )
        if not isinstance(value, str):
            raise ScopeError(
                f"config['configurable'][{key!r}] must be a string (the dataset), got {type(value).__name__}"
            )
        check_scope(value, self.project)
        return {"dataset": value, "project": self.project}


def fact_id(scored: ScoredFact) -> str:
    """A stable document id for one fact."""
    return f"memsoda-fact-{scored.fact.id}"


def context_id(result: RecallResult) -> str:
    """A stable document id for a rendered context: the same block gets the same id."""
    return "memsoda-context-" + hashlib.sha256(result.context.encode()).hexdigest()[:16]


def context_metadata(result: RecallResult, *, episodes: bool) -> dict[str, Any]:
    """JSON-serializable metadata of a context document: the scored facts, entities, degraded
    flag and reason, synthesis and errors; episodes only when they were asked for."""
    dropped = {"context", "timings_ms"} | (set() if episodes else {"episodes"})
    return {key: value for key, value in result.to_dict().items() if key not in dropped}


class WrappedEmbedder:
    """Base of the framework embedder wrappers: the recorded `model` name and a `dimensions`
    measured once (by embedding one short text) when not given. Subclasses supply the four
    embedding methods of the `Embedder` protocol."""

    def __init__(self, wrapped: object, model: str | None, dimensions: int | None, *, wrapper: str) -> None:
        if not model:
            raise ConfigurationError(
                f"cannot tell which model {type(wrapped).__name__} uses: pass {wrapper}(..., model='name')"
            )
        self._model = model
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        """The model identifier recorded in the store."""
        return self._model

    @property
    def dimensions(self) -> int:
        """Vector length (measured once when not given)."""
        if self._dimensions is None:
            self._dimensions = len(self.embed_query("dimension probe"))
        return self._dimensions

    def embed_query(self, text: str) -> list[float]:  # pragma: no cover - overridden
        raise NotImplementedError


def conversation_messages(messages: Iterable[Any] | None) -> list[dict[str, str]] | None:
    """Chat messages as `recall(conversation=...)` takes them ({"role", "content"}, oldest first):
    mappings pass through; a framework message gives its `role` (LlamaIndex's ChatMessage) or its
    `type` (LangChain's "human" / "ai"), and its text content. Messages without text are skipped."""
    if messages is None:
        return None
    out = []
    for message in messages:
        if isinstance(message, Mapping):
            out.append(dict(message))
            continue
        role = getattr(message, "role", None) or getattr(message, "type", None)
        role = getattr(role, "value", role)  # an enum such as LlamaIndex's MessageRole
        content = getattr(message, "content", None)
        if isinstance(content, str) and content.strip() and isinstance(role, str):
            out.append({"role": role, "content": content})
    return out
