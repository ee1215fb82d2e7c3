"""memsoda for LangGraph: `MemsodaStore`, a `BaseStore` whose items live in memsoda and whose
`search(query=...)` is memsoda's fused recall, so `create_agent(store=...)`, `get_store()` and
langmem's memory tools run on memsoda unchanged.

    store = MemsodaStore(Memory.open())
    store.put(("memories", "u1"), "k1", {"content": "prefers window seats"})
    store.search(("memories", "u1"), query="where does the user like to sit?")
"""

from memsoda_langgraph.store import MemsodaStore

__all__ = ["MemsodaStore"]
