"""`MemsodaRetriever`: memsoda's recall as a LangChain retriever. Translation only; the recall
itself (signals, fusion, rendering) is `Memory.recall` / `AsyncMemory.recall`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pydantic
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import PrivateAttr

from memsoda_core import ArgumentTypeError, AsyncMemory, Memory, RecallResult, TimeInput
from memsoda_core.adapting import (
    RunScope,
    check_adapter_arguments,
    context_id,
    context_metadata,
    conversation_messages,
    fact_id,
    framework_query,
    recall_async,
    recall_sync,
)


class MemsodaRetriever(BaseRetriever):
    """Recall from a memsoda `Memory` or `AsyncMemory` as LangChain Documents.

    `mode="context"` (default): one Document whose `page_content` is the rendered context block and
    whose metadata holds the scored facts, the entities and (with `include=["episodes"]`) the
    episodes; no Document when nothing matched. `mode="facts"`: one Document per fact in fused
    order, `id` "memsoda-fact-<id>", metadata `ScoredFact.to_dict()`.

    `k` (facts in the context) is set here and per call, as are `query_embedding`, `as_of` and
    `include`: `retriever.invoke(query, k=3, as_of="2025-01-01")`; `known_at` asks what memory knew
    then (transaction time). `conversation` (per call: the
    prior messages, LangChain messages or {"role", "content"} mappings, oldest first) lets recall
    use the user's recent turns: `retriever.invoke(query, conversation=history)`. With an `AsyncMemory` only
    `ainvoke` works (its pool lives on an event loop); a `Memory` serves both, async calls
    running it in an executor.

    Whose memory: `dataset="alice"` fixes it; `dataset_from="user_id"` reads it from each run's
    `config["configurable"]["user_id"]` (`retriever.invoke(q, config={"configurable": {"user_id":
    "alice"}})`, or the config of the chain or agent the retriever runs in), so one retriever
    serves many users. A run that does not set the key raises `ScopeError`.

    A query longer than recall takes (a user's message a chain passes on) is recalled by its head
    (`memsoda_core.adapting.framework_query`), as a vector store's retriever embeds the head of any.

    Bad arguments raise memsoda's errors when the retriever is built, never pydantic's: the scope
    (`ScopeError`; `ConfigurationError` for both dataset forms), `memory` and `mode`
    (`ConfigurationError`), `k` out of 1..200 (`LimitError`) or not an int (`ArgumentTypeError`),
    `include` (`ArgumentTypeError`, `ValidationError`); a bad LangChain field (`tags`, ...) is an
    `ArgumentTypeError` too (`memsoda_core.adapting.check_adapter_arguments`).
    """

    memory: Memory | AsyncMemory
    project: str
    dataset: str | None = None
    dataset_from: str | None = None
    mode: Literal["context", "facts"] = "context"
    k: int = 8
    include: tuple[str, ...] = ()
    _scope: RunScope = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        scope = RunScope(data.get("project"), data.get("dataset"), data.get("dataset_from"))  # type: ignore[arg-type]
        ours = {name: data[name] for name in ("mode", "k", "include") if name in data}
        data.update(check_adapter_arguments(data.get("memory"), adapter="MemsodaRetriever", **ours))
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:  # a LangChain field: ours are checked above
            raise ArgumentTypeError(f"MemsodaRetriever: {exc}") from exc
        self._scope = scope

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """`BaseRetriever.invoke`, reading the run's user from `config` (see the class docstring)."""
        config = ensure_config(config)
        return super().invoke(input, config, **kwargs, scope=self._scope.resolve(config["configurable"]))

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        """`BaseRetriever.ainvoke`, reading the run's user from `config`."""
        config = ensure_config(config)
        return await super().ainvoke(input, config, **kwargs, scope=self._scope.resolve(config["configurable"]))

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        scope: dict[str, str] | None = None,
        k: int | None = None,
        query_embedding: Sequence[float] | None = None,
        as_of: TimeInput | None = None,
        include: Sequence[str] | None = None,
        conversation: Sequence[Any] | None = None,
        known_at: TimeInput | None = None,
    ) -> list[Document]:
        kwargs = self._recall_kwargs(scope, k, query_embedding, as_of, include, conversation, known_at)
        return self._documents(recall_sync(self.memory, framework_query(query), **kwargs), kwargs["include"])

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        scope: dict[str, str] | None = None,
        k: int | None = None,
        query_embedding: Sequence[float] | None = None,
        as_of: TimeInput | None = None,
        include: Sequence[str] | None = None,
        conversation: Sequence[Any] | None = None,
        known_at: TimeInput | None = None,
    ) -> list[Document]:
        kwargs = self._recall_kwargs(scope, k, query_embedding, as_of, include, conversation, known_at)
        return self._documents(await recall_async(self.memory, framework_query(query), **kwargs), kwargs["include"])

    def _recall_kwargs(
        self,
        scope: dict[str, str] | None,
        k: int | None,
        query_embedding: Sequence[float] | None,
        as_of: TimeInput | None,
        include: Sequence[str] | None,
        conversation: Sequence[Any] | None = None,
        known_at: TimeInput | None = None,
    ) -> dict[str, Any]:
        chosen = self.include if include is None else include
        return {
            **(self._scope.resolve(ensure_config()["configurable"]) if scope is None else scope),
            "facts_in_context": self.k if k is None else k,
            "query_embedding": query_embedding,
            "as_of": as_of,
            "known_at": known_at,
            "include": (chosen,) if isinstance(chosen, str) else tuple(chosen),
            "conversation": conversation_messages(conversation),
        }

    def _documents(self, result: RecallResult, include: tuple[str, ...]) -> list[Document]:
        if self.mode == "facts":
            return [
                Document(id=fact_id(scored), page_content=scored.fact.text, metadata=scored.to_dict())
                for scored in result.facts
            ]
        if not result.context:
            return []
        metadata = context_metadata(result, episodes="episodes" in include)
        return [Document(id=context_id(result), page_content=result.context, metadata=metadata)]
