"""`LangChainEmbedder`: any LangChain `Embeddings` as a memsoda `Embedder`."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from memsoda_core.adapting import WrappedEmbedder


class LangChainEmbedder(WrappedEmbedder):
    """Wraps a LangChain `Embeddings` so `Memory.open(embedder=...)` accepts it.

    `model` is recorded in the store (a different model later is refused); it defaults to the
    wrapped object's `model` or `model_name` attribute. `dimensions`, when not given, is measured
    by embedding one short text on first use.
    """

    def __init__(self, embeddings: Embeddings, *, model: str | None = None, dimensions: int | None = None) -> None:
        found = model or getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        super().__init__(embeddings, found if isinstance(found, str) else None, dimensions, wrapper="LangChainEmbedder")
        self.embeddings = embeddings

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        return self.embeddings.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        return self.embeddings.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async `embed_documents`."""
        return await self.embeddings.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Async `embed_query`."""
        return await self.embeddings.aembed_query(text)
