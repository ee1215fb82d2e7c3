"""`MemsodaMemoryBlock`: recalled facts as a block of a LlamaIndex agent `Memory`."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory.memory import BaseMemoryBlock

from memsoda_core import AsyncMemory, Memory
from memsoda_core.adapting import conversation_messages, recall_async
from memsoda_core.limits import MAX_K


class MemsodaMemoryBlock(BaseMemoryBlock[str]):
    """Fills a `llama_index.core.memory.Memory` with memsoda's context for the latest message,
    recalled with the chat history as its conversation (the user's recent turns).

    The scope is resolved on every call, never remembered: `dataset` and `project` given to
    `memory.aget(dataset=..., project=...)` win, then this block's fields; `dataset=None` (the
    default) uses the LlamaIndex Memory's `session_id` as the dataset. The block is read-only:
    write facts with `Memory.add_facts`. With an `AsyncMemory`, call `await memory.aget()` on
    the event loop that opened it (the sync `memory.get()` runs on another loop).
    """

    name: str = Field(default="memsoda", description="The name of the memory block.")
    memory: Memory | AsyncMemory = Field(description="The memsoda Memory or AsyncMemory to recall from.")
    dataset: str | None = Field(default=None, description="memsoda dataset; None: the session_id.")
    project: str = Field(default="default", description="memsoda project.")
    k: int = Field(default=8, ge=1, le=MAX_K, description="Facts in the context.")
    include: tuple[str, ...] = Field(default=(), description="Recall extras, e.g. ('episodes',).")
    accept_short_term_memory: bool = Field(default=False, description="Read-only: flushed messages are ignored.")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        query = _latest_text(messages or [])
        if not query:
            return ""
        kwargs: dict[str, Any] = {
            "dataset": block_kwargs.get("dataset") or self.dataset or block_kwargs.get("session_id"),
            "project": block_kwargs.get("project") or self.project,
            "facts_in_context": self.k,
            "include": self.include,
            "conversation": conversation_messages(messages),
        }
        return (await recall_async(self.memory, query, **kwargs)).context

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Nothing: memsoda stores extracted facts, not chat messages."""


def _latest_text(messages: list[ChatMessage]) -> str:
    """The text of the latest user message (else of the latest message with text)."""
    for role in (MessageRole.USER, None):
        for message in reversed(messages):
            if (role is None or message.role == role) and message.content and message.content.strip():
                return message.content
    return ""
