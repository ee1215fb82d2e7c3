"""memsoda for LlamaIndex: `MemsodaRetriever` (a `BaseRetriever` over `recall`),
`MemsodaMemoryBlock` (recalled context in a `llama_index.core.memory.Memory`) and
`LlamaIndexEmbedder` (any LlamaIndex `BaseEmbedding` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    nodes = retriever.retrieve("what does the user drive?")
"""

from memsoda_llamaindex.embedder import LlamaIndexEmbedder
from memsoda_llamaindex.memory_block import MemsodaMemoryBlock
from memsoda_llamaindex.retriever import MemsodaRetriever

__all__ = ["LlamaIndexEmbedder", "MemsodaMemoryBlock", "MemsodaRetriever"]
