"""memsoda for LangChain: `MemsodaRetriever` (a `BaseRetriever` over `recall`) and
`LangChainEmbedder` (any LangChain `Embeddings` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    docs = retriever.invoke("what does the user drive?", k=3)
"""

from .embedder import LangChainEmbedder
from .retriever import MemsodaRetriever

__all__ = ["LangChainEmbedder", "MemsodaRetriever"]
