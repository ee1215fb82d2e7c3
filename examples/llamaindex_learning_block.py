"""A LlamaIndex agent `Memory` whose memsoda block learns from the messages it flushes, offline.

Session 1 chats until the short-term window flushes its oldest messages: the block sends them to
`remember`, whose extractor turns them into facts. Session 2 (another LlamaIndex Memory) recalls
them. No model runs here, so the extractor is a LlamaIndex `MockLLM` subclass that answers with a
fixed JSON (clearly a script, not a model); with a real LLM pass `extractor=OpenAI(...)` or any
LlamaIndex LLM. Run: `python examples/llamaindex_learning_block.py`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.llms import ChatMessage, MockLLM
from llama_index.core.memory import Memory as ChatMemory

from memsoda_core import AsyncMemory, LocalEmbedder
from memsoda_llamaindex import MemsodaMemoryBlock

SCOPE = {"dataset": "alice", "project": "assistant"}
FACT = {
    "subject": "user", "predicate": "plays", "object": "the violin", "subject_type": "PERSON",
    "object_type": "LITERAL", "mentions": [], "valid_at": None, "invalid_at": None, "confidence": 1.0,
    "source_quote": "I play the violin",
}  # fmt: skip
SCRIPTED_ANSWER = {
    "operations": [{"op": "add", "fact_id": None, "fact": FACT, "ended_at": None, "source_quote": None}],
    "summary": None,
}


class ScriptedLLM(MockLLM):
    """Stands in for an LLM: completes every prompt with `SCRIPTED_ANSWER`."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=json.dumps(SCRIPTED_ANSWER))


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-example-") as home:
        async with await AsyncMemory.open(home=home, embedder=LocalEmbedder()) as memory:
            block = MemsodaMemoryBlock(memory=memory, **SCOPE, extractor=ScriptedLLM())
            first = ChatMemory.from_defaults(
                session_id="s-1", memory_blocks=[block], token_limit=60, chat_history_token_ratio=0.5,
                token_flush_size=20,
            )  # fmt: skip
            for role, text in [
                ("user", "I play the violin every evening, for about an hour or so."),
                ("assistant", "That is a lovely habit; how long have you played it?"),
                ("user", "Since I was a child, about twenty years now in total."),
            ]:
                await first.aput(ChatMessage(role=role, content=text))
            await first.aget()  # the oldest messages are flushed to the block, which learns from them
            for fact in (await memory.list_facts(**SCOPE)).facts:
                print(f"learned [{fact.id}] {fact.text} (from {fact.source_quote!r})")
            second = ChatMemory.from_defaults(
                session_id="s-2", memory_blocks=[MemsodaMemoryBlock(memory=memory, **SCOPE)]
            )
            await second.aput(ChatMessage(role="user", content="Which instrument do I play?"))
            print("=== session 2: the system message ===")
            print((await second.aget())[0].content)


if __name__ == "__main__":
    asyncio.run(main())
