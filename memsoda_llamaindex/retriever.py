"""`MemsodaRetriever`: memsoda's recall as a LlamaIndex retriever. Translation only; the recall
itself is `Memory.recall` / `AsyncMemory.recall`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from memsoda_core import AsyncMemory, Memory, RecallResult, TimeInput
from memsoda_core.adapting import (
    check_adapter_arguments,
    context_id,
    context_metadata,
    fact_id,
    framework_query,
    recall_async,
    recall_sync,
)
from memsoda_core.validation import check_scope


class MemsodaRetriever(BaseRetriever):
    """Recall from a memsoda `Memory` or `AsyncMemory` as LlamaIndex nodes.

    `mode="context"` (default): one node whose text is the rendered context block and whose
    metadata holds the scored facts, the entities and (with `include=["episodes"]`) the episodes;
    no node when nothing matched. `mode="facts"`: one node per fact in fused order, id
    "memsoda-fact-<id>", metadata `ScoredFact.to_dict()`, score the fused score. Metadata is kept
    out of the LLM and embedding text. `QueryBundle.embedding` is used as the query vector, so
    the embedder is not called. With an `AsyncMemory` only `aretrieve` works; a `Memory` serves
    both (async calls run it in a thread).

    LlamaIndex's `retrieve` takes only the query, so per-call settings come from a copy:
    `retriever.with_options(k=3, as_of="2025-01-01").retrieve(...)` (also `known_at`: what memory
    knew then, and `dataset`: another user). The arguments are checked here: the scope
    (`ScopeError`), `memory`, `mode` (`ConfigurationError`), `k` (`LimitError`,
    `ArgumentTypeError`), `include` (`memsoda_core.adapting.check_adapter_arguments`). A query
    longer than recall takes (the user's message a `ContextChatEngine` passes on) is recalled by
    its head (`memsoda_core.adapting.framework_query`).
    """

    def __init__(
        self,
        *,
        memory: Memory | AsyncMemory,
        dataset: str,
        project: str,
        mode: Literal["context", "facts"] = "context",
        k: int = 8,
        include: Sequence[str] = (),
        as_of: TimeInput | None = None,
        known_at: TimeInput | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_scope(dataset, project)
        checked = check_adapter_arguments(memory, adapter="MemsodaRetriever", mode=mode, k=k, include=include)
        self.memory = memory
        self.dataset = dataset
        self.project = project
        self.mode = mode
        self.k = k
        self.include: tuple[str, ...] = checked["include"]
        self.as_of = as_of
        self.known_at = known_at
        self._verbose = verbose
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def with_options(
        self,
        *,
        dataset: str | None = None,
        k: int | None = None,
        as_of: TimeInput | None = None,
        known_at: TimeInput | None = None,
        include: Sequence[str] | None = None,
    ) -> MemsodaRetriever:
        """A copy with these settings changed (same memory, project, mode and callbacks); `dataset`:
        another user's memory, e.g. one copy per request of a server that serves many users."""
        return MemsodaRetriever(
            memory=self.memory,
            dataset=self.dataset if dataset is None else dataset,
            project=self.project,
            mode=self.mode,
            k=self.k if k is None else k,
            include=self.include if include is None else include,
            as_of=self.as_of if as_of is None else as_of,
            known_at=self.known_at if known_at is None else known_at,
            callback_manager=self.callback_manager,
            verbose=self._verbose,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = framework_query(query_bundle.query_str)
        return self._nodes(recall_sync(self.memory, query, **self._recall_kwargs(query_bundle)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = framework_query(query_bundle.query_str)
        return self._nodes(await recall_async(self.memory, query, **self._recall_kwargs(query_bundle)))

    def _recall_kwargs(self, query_bundle: QueryBundle) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "project": self.project,
            "facts_in_context": self.k,
            "include": self.include,
            "query_embedding": query_bundle.embedding,
            "as_of": self.as_of,
            "known_at": self.known_at,
        }

    def _nodes(self, result: RecallResult) -> list[NodeWithScore]:
        if self.mode == "facts":
            return [
                NodeWithScore(node=_node(fact_id(s), s.fact.text, s.to_dict()), score=s.score) for s in result.facts
            ]
        if not result.context:
            return []
        metadata = context_metadata(result, episodes="episodes" in self.include)
        return [NodeWithScore(node=_node(context_id(result), result.context, metadata), score=None)]


def _node(node_id: str, text: str, metadata: dict[str, Any]) -> TextNode:
    keys = list(metadata)
    return TextNode(
        id_=node_id, text=text, metadata=metadata, excluded_llm_metadata_keys=keys, excluded_embed_metadata_keys=keys
    )
