"""memsoda for LangChain: `MemsodaRetriever` (a `BaseRetriever` over `recall`) and
`LangChainEmbedder` (any LangChain `Embeddings` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    docs = retriever.invoke("what does the user drive?", k=3)
"""

from memsoda_langchain.embedder import LangChainEmbedder
from memsoda_langchain.retriever import MemsodaRetriever

__all__ = ["LangChainEmbedder", "MemsodaRetriever"]
