"""memsoda for LlamaIndex: `MemsodaRetriever` (a `BaseRetriever` over `recall`),
`MemsodaMemoryBlock` (recalled context in a `llama_index.core.memory.Memory`), `MemsodaProfileBlock`
(the standing profile, for a warm prompt cache) and
`LlamaIndexEmbedder` (any LlamaIndex `BaseEmbedding` as a memsoda embedder).

    retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant")
    nodes = retriever.retrieve("what does the user drive?")
"""

from memsoda_llamaindex.embedder import LlamaIndexEmbedder
from memsoda_llamaindex.memory_block import MemsodaMemoryBlock, MemsodaProfileBlock
from memsoda_llamaindex.retriever import MemsodaRetriever

__all__ = ["LlamaIndexEmbedder", "MemsodaMemoryBlock", "MemsodaProfileBlock", "MemsodaRetriever"]
