"""memsoda for LlamaIndex: `MemsodaRetriever` (a `BaseRetriever` over `recall`),
`MemsodaMemoryBlock` (recalled context in a `llama_index.core.memory.Memory`) and
`LlamaIndexEmbedder` (any LlamaIndex `BaseEmbedding` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    nodes = retriever.retrieve("what does the user drive?")
"""

from .embedder import LlamaIndexEmbedder
from .memory_block import MemsodaMemoryBlock
from .retriever import MemsodaRetriever

__all__ = ["LlamaIndexEmbedder", "MemsodaMemoryBlock", "MemsodaRetriever"]
