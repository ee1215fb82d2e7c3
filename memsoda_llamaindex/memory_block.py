"""`MemsodaMemoryBlock`: memsoda as a block of a LlamaIndex agent `Memory`: it recalls for the
latest message and learns from the messages the Memory flushes. `MemsodaProfileBlock`: the standing
profile (`Memory.profile`) as a system message at the head of the history, byte-identical until a
fact of it changes, so a prompt cache stays warm.

    Memory.from_defaults(memory_blocks=[MemsodaProfileBlock(memory=m, dataset="u1", project="app"),
                                        MemsodaMemoryBlock(memory=m, dataset="u1", project="app",
                                                           exclude_profile=True)],
                         insert_method=InsertMethod.USER)

puts the profile first and the recall into the latest user message, without repeating a fact."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError
from llama_index.core.memory.memory import BaseMemoryBlock

from memsoda_core import ArgumentTypeError, AsyncMemory, ConfigurationError, Memory, ScopeError
from memsoda_core.adapting import call_async, check_adapter_arguments, conversation_messages, recall_async
from memsoda_core.recall.profile import DEFAULT_MAX_FACTS
from memsoda_core.text import message_query
from memsoda_core.validation import check_scope

LEARNED_ROLES = frozenset({MessageRole.USER, MessageRole.ASSISTANT})


class MemsodaMemoryBlock(BaseMemoryBlock[str]):
    """Fills a `llama_index.core.memory.Memory` with memsoda's context for the latest message
    (its head when longer than recall takes: `memsoda_core.text.message_query`), recalled with
    the chat history as its conversation (the user's recent turns), and learns from
    the messages the Memory flushes out of its short-term window (`Memory.remember`), when an
    extractor is configured (`extractor=` here, or the one memsoda was opened with).

    The scope: `dataset` and `project` given to `memory.aget(dataset=..., project=...)` win, then
    this block's fields; a block that learns (an extractor, `accept_short_term_memory`) refuses a
    per-call scope other than the one it learns into (`ConfigurationError`), since LlamaIndex
    flushes messages with the session id alone. `dataset` is required (`ScopeError` when the block
    is built without it): LlamaIndex gives each `Memory` a random `session_id` unless told
    otherwise, so a scope taken from it would be empty on every run; set `use_session_id=True`
    instead to use the session id as the dataset when you choose it yourself. With
    an `AsyncMemory`, call `await memory.aget()` / `aput()` on the event loop that opened it.

    With `ReActAgent` (llama-index-core 0.14), build the Memory with
    `insert_method=InsertMethod.USER`: the agent drops the first system message, where the block's
    context goes by default, so the model would never see it. `FunctionAgent` keeps it.
    """

    name: str = Field(default="memsoda", description="The name of the memory block.")
    memory: Memory | AsyncMemory = Field(description="The memsoda Memory or AsyncMemory to recall from.")
    dataset: str | None = Field(default=None, description="memsoda dataset (required unless use_session_id).")
    use_session_id: bool = Field(default=False, description="Use the LlamaIndex session_id as the dataset.")
    project: str = Field(description="memsoda project (required, as everywhere in memsoda).")
    k: int = Field(default=8, description="Facts in the context (1..200).")
    include: tuple[str, ...] = Field(default=(), description="Recall extras, e.g. ('episodes',).")
    extractor: Any = Field(default=None, description="remember's model; None: the memsoda Memory's.")
    accept_short_term_memory: bool = Field(default=True, description="Learn from flushed messages.")
    exclude_profile: bool = Field(default=False, description="Leave out the profile's facts (MemsodaProfileBlock).")
    profile_max_facts: int = Field(default=DEFAULT_MAX_FACTS, description="The profile's size (1..200).")
    profile_subject: str = Field(default="user", description="The profile's subject.")
    _said_no_extractor: bool = PrivateAttr(default=False)

    if not TYPE_CHECKING:  # at run time only: type checkers keep pydantic's signature of the fields

        def __init__(self, **data: Any) -> None:
            """Bad arguments raise memsoda's errors when the block is built (`_checked_block`)."""
            checked = _checked_block("MemsodaMemoryBlock", data, ("k", "include", "profile_max_facts"))
            try:
                super().__init__(**checked)
            except ValidationError as exc:  # a LlamaIndex field: ours are checked above
                raise ArgumentTypeError(f"MemsodaMemoryBlock: {exc}") from exc

    def _dataset(self, given: Any, session_id: Any) -> str:
        return _block_dataset("MemsodaMemoryBlock", given or self.dataset, self.use_session_id, session_id)

    def _extractor(self) -> Any:
        """The model that learns flushed messages: this block's, else the memsoda Memory's (or None)."""
        return self.extractor if self.extractor is not None else self.memory._context.extractor

    def _learns(self) -> bool:
        """Whether flushed messages are learned: LlamaIndex passes them on and a model is there."""
        return self.accept_short_term_memory and self._extractor() is not None

    def _check_learned_where_read(self, block_kwargs: dict[str, Any]) -> None:
        """A learning block reads the scope it writes: LlamaIndex flushes messages with the session id
        alone, so they are learned into this block's dataset (or the session id); a per-call scope
        that differs would read one user's memory and write their conversation into another's."""
        given = (block_kwargs.get("dataset"), block_kwargs.get("project"))
        if given == (None, None) or not self._learns():
            return
        session = block_kwargs.get("session_id")
        learned = (self.dataset or (str(session) if self.use_session_id and session else None), self.project)
        read = (str(given[0] or learned[0]), str(given[1] or learned[1]))
        if read != learned:
            raise ConfigurationError(
                f"MemsodaMemoryBlock learns flushed messages into dataset={learned[0]!r}, project={learned[1]!r}, "
                f"but aget() asked for dataset={read[0]!r}, project={read[1]!r}: it would read one scope and "
                "learn the conversation into another. Use one block per user (dataset=...), or "
                "use_session_id=True with the session id as the dataset"
            )

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        self._check_learned_where_read(block_kwargs)
        dataset = self._dataset(block_kwargs.get("dataset"), block_kwargs.get("session_id"))
        query = message_query(_latest_text(messages or []))
        if not query:
            return ""
        kwargs: dict[str, Any] = {
            "dataset": dataset,
            "project": block_kwargs.get("project") or self.project,
            "facts_in_context": self.k,
            "include": self.include,
            "conversation": conversation_messages(messages),
        }
        if self.exclude_profile:
            scope = {"dataset": dataset, "project": kwargs["project"]}
            profile = await call_async(
                self.memory, "profile", **scope, subject=self.profile_subject, max_facts=self.profile_max_facts
            )
            kwargs["exclude"] = profile.fact_ids
        return (await recall_async(self.memory, query, **kwargs)).context

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Learn from flushed messages through `remember` (one window, one transaction)."""
        extractor = self._extractor()
        if extractor is None:
            if not self._said_no_extractor:
                self._said_no_extractor = True
                warnings.warn(
                    "MemsodaMemoryBlock learns nothing from flushed messages: no extractor is configured "
                    "(pass extractor= to the block, or to Memory.open)",
                    UserWarning,
                    stacklevel=2,
                )
            return
        session = next((m.additional_kwargs.get("session_id") for m in messages if m.additional_kwargs), None)
        window = [
            {"role": message.role.value, "content": message.content}
            for message in messages
            if message.role in LEARNED_ROLES and message.content and message.content.strip()
        ]
        if not window:
            return
        await call_async(
            self.memory,
            "remember",
            window,
            dataset=self._dataset(None, session),
            project=self.project,
            thread_id=None if session is None else str(session),
            extractor=extractor,
        )


class MemsodaProfileBlock(BaseMemoryBlock[list[ChatMessage]]):
    """The standing profile of `subject` (`Memory.profile`) as one system message the Memory puts
    before the chat history; none while the profile is empty. Its text changes only when a fact of
    the profile does. Scope: `dataset` / `project` of `aget(...)` win, then these fields. Pair it
    with `MemsodaMemoryBlock(exclude_profile=True)` (same `max_facts` and `subject` as its
    `profile_*`) so the recall does not repeat the profile."""

    name: str = Field(default="memsoda_profile", description="The name of the memory block.")
    memory: Memory | AsyncMemory = Field(description="The memsoda Memory or AsyncMemory to read.")
    dataset: str | None = Field(default=None, description="memsoda dataset (required unless use_session_id).")
    use_session_id: bool = Field(default=False, description="Use the LlamaIndex session_id as the dataset.")
    project: str = Field(description="memsoda project.")
    max_facts: int = Field(default=DEFAULT_MAX_FACTS, description="Facts in the profile (1..200).")
    subject: str = Field(default="user", description="Whose facts.")
    priority: int = Field(default=0, description="0: never truncated (a cut profile would change the prefix).")
    accept_short_term_memory: bool = Field(default=False, description="The profile learns nothing itself.")

    if not TYPE_CHECKING:  # at run time only: type checkers keep pydantic's signature of the fields

        def __init__(self, **data: Any) -> None:
            """Bad arguments raise memsoda's errors when the block is built (`_checked_block`)."""
            checked = _checked_block("MemsodaProfileBlock", data, ("max_facts",))
            try:
                super().__init__(**checked)
            except ValidationError as exc:  # a LlamaIndex field: ours are checked above
                raise ArgumentTypeError(f"MemsodaProfileBlock: {exc}") from exc

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> list[ChatMessage]:
        given = block_kwargs.get("dataset") or self.dataset
        dataset = _block_dataset("MemsodaProfileBlock", given, self.use_session_id, block_kwargs.get("session_id"))
        scope = {"dataset": dataset, "project": block_kwargs.get("project") or self.project}
        profile = await call_async(self.memory, "profile", **scope, subject=self.subject, max_facts=self.max_facts)
        return [ChatMessage(role=MessageRole.SYSTEM, content=profile.text)] if profile.text else []

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """The profile is read from memory; what the Memory flushes is learned by MemsodaMemoryBlock."""


def _checked_block(block: str, data: dict[str, Any], checked: tuple[str, ...]) -> dict[str, Any]:
    """A block's constructor arguments checked as memsoda checks them, not by pydantic (which would
    wrap the error in its own): a block that names no scope raises `ScopeError` (as `RunScope`
    does) when it is built, not at its first `get`; `memory`, `k`, `include` and the profile's size
    as `memsoda_core.adapting.check_adapter_arguments` says."""
    dataset, project = data.get("dataset"), data.get("project")
    if dataset is None and not data.get("use_session_id", False):
        raise ScopeError(
            f"{block} needs dataset='...' (whose memory this is): LlamaIndex's default session_id is "
            "random, so its scope would be empty; or use_session_id=True when you set it"
        )
    check_scope("-" if dataset is None else dataset, project)
    ours = {name: data[name] for name in checked if name in data}
    return {**data, **check_adapter_arguments(data.get("memory"), adapter=block, **ours)}


def _block_dataset(block: str, chosen: Any, use_session_id: bool, session_id: Any) -> str:
    """The dataset a block reads: the one given (per call, else the block's), else the session id."""
    dataset = chosen or (session_id if use_session_id else None)
    if not dataset:
        raise ScopeError(f"{block}(use_session_id=True) was called without a session_id")
    return str(dataset)


def _latest_text(messages: list[ChatMessage]) -> str:
    """The text of the latest user message (else of the latest message with text)."""
    for role in (MessageRole.USER, None):
        for message in reversed(messages):
            if (role is None or message.role == role) and message.content and message.content.strip():
                return message.content
    return ""
