"""memsoda as a memory block of a LlamaIndex agent `Memory`, offline, with `AsyncMemory`.

The block recalls memsoda's context for the latest user message and LlamaIndex puts it into the
system message. With `use_session_id=True` (and no fixed `dataset`), each chat session's
`session_id`, which we set here to the user's name, is its dataset, so one block serves every user
without leaking between them. `MockLLM` echoes what it was sent; use a real LLM (or
`FunctionAgent(..., memory=chat_memory)`; for `ReActAgent`, build the Memory with
`insert_method=InsertMethod.USER`) for real answers.
Run: `python examples/llamaindex_memory_block.py`.
"""

from __future__ import annotations

import asyncio
import tempfile

from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import Memory as ChatMemory

from memsoda_core import AsyncMemory, LocalEmbedder
from memsoda_llamaindex import MemsodaMemoryBlock

PROJECT = "assistant"
FACTS = {
    "alice": [
        {"subject": "alice", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
        {"subject": "alice", "predicate": "is allergic to", "object": "peanuts", "object_type": "LITERAL"},
    ],
    "bob": [
        {"subject": "bob", "predicate": "drives", "object": "tesla model 3", "object_type": "PRODUCT"},
        {"subject": "bob", "predicate": "lives in", "object": "berlin", "object_type": "LOCATION"},
    ],
}


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-example-") as home:
        async with await AsyncMemory.open(home=home, embedder=LocalEmbedder()) as memory:
            for user, facts in FACTS.items():
                await memory.add_facts(facts, dataset=user, project=PROJECT)
            block = MemsodaMemoryBlock(memory=memory, project=PROJECT, k=4, use_session_id=True)
            llm = MockLLM()
            for user in ("alice", "bob"):
                chat_memory = ChatMemory.from_defaults(session_id=user, memory_blocks=[block])
                await chat_memory.aput(ChatMessage(role="user", content="Which car do I drive?"))
                messages = await chat_memory.aget()
                print(f"=== session {user}: what the LLM is sent ===")
                print((await llm.achat(messages)).message.content)
                print()


if __name__ == "__main__":
    asyncio.run(main())
