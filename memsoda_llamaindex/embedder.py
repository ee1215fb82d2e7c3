"""`LlamaIndexEmbedder`: any LlamaIndex `BaseEmbedding` as a memsoda `Embedder`."""

from __future__ import annotations

from llama_index.core.base.embeddings.base import BaseEmbedding

from memsoda_core.adapting import WrappedEmbedder


class LlamaIndexEmbedder(WrappedEmbedder):
    """Wraps a LlamaIndex `BaseEmbedding` so `Memory.open(embedder=...)` accepts it.

    `model` is recorded in the store (a different model later is refused); it defaults to the
    wrapped model's `model_name`. `dimensions`, when not given, is measured by embedding one short
    text on first use.
    """

    def __init__(self, embedding: BaseEmbedding, *, model: str | None = None, dimensions: int | None = None) -> None:
        found = model or (embedding.model_name if embedding.model_name != "unknown" else None)
        super().__init__(embedding, found, dimensions, wrapper="LlamaIndexEmbedder")
        self.embedding = embedding

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        return self.embedding.get_text_embedding_batch(texts)

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        return self.embedding.get_query_embedding(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async `embed_documents`."""
        return await self.embedding.aget_text_embedding_batch(texts)

    async def aembed_query(self, text: str) -> list[float]:
        """Async `embed_query`."""
        return await self.embedding.aget_query_embedding(text)
