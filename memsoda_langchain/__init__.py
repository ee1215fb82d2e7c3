"""memsoda for LangChain: `MemsodaRetriever` (a `BaseRetriever` over `recall`), `memory_tools`
(an agent's recall / save / correct / end tools), `MemsodaContextMiddleware` (the profile in a
`create_agent` system prompt, the recall after the latest user message) and `LangChainEmbedder` (any LangChain
`Embeddings` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    docs = retriever.invoke("what does the user drive?", k=3)
"""

from memsoda_langchain.context import MemsodaContextMiddleware
from memsoda_langchain.embedder import LangChainEmbedder
from memsoda_langchain.retriever import MemsodaRetriever
from memsoda_langchain.tools import memory_tools, render_facts

__all__ = ["LangChainEmbedder", "MemsodaContextMiddleware", "MemsodaRetriever", "memory_tools", "render_facts"]
