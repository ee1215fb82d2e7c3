"""`MemsodaContextMiddleware`: memsoda in a `langchain.agents.create_agent` prompt, laid out so a
provider's prompt cache stays warm.

Every model call gets the standing profile (`Memory.profile`) appended to the system message, which
stays byte-identical until a fact of the profile changes, and the recall for the latest user message
(`Memory.recall(exclude=profile.fact_ids)`, so nothing is shown twice) as a message right after that
user message. The recall is added to the model request only, never to the agent's state: the next
turn's prompt, up to its own latest message, starts with the same bytes as this one's.

    agent = create_agent(model, tools, system_prompt="You are helpful.",
                         middleware=[MemsodaContextMiddleware(memory=memory, dataset="u1", project="app")])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langgraph.config import get_config

from memsoda_core import AsyncMemory, Memory, Profile, RecallResult
from memsoda_core.adapting import RunScope, call_async, call_sync, check_adapter_arguments, conversation_messages
from memsoda_core.recall.profile import DEFAULT_MAX_FACTS
from memsoda_core.text import message_query

RECALL_NAME = "memsoda_recall"
"""The `name` of the message that carries the recall block."""


class MemsodaContextMiddleware(AgentMiddleware):
    """The profile in the system message, the recall after the latest user message (module doc).
    Whose memory: a fixed `dataset`, or `dataset_from`, a key of each run's
    `config["configurable"]` (`RunScope`). `k`: facts in the recall block; `max_facts`, `subject`:
    the profile's (`Memory.profile`), checked when it is built (`LimitError`, `ArgumentTypeError`). With
    an AsyncMemory, invoke the agent asynchronously."""

    def __init__(
        self,
        *,
        memory: Memory | AsyncMemory,
        project: str,
        dataset: str | None = None,
        dataset_from: str | None = None,
        k: int = 8,
        max_facts: int = DEFAULT_MAX_FACTS,
        subject: str = "user",
    ) -> None:
        super().__init__()
        self.scope = RunScope(project=project, dataset=dataset, dataset_from=dataset_from)
        check_adapter_arguments(memory, adapter="MemsodaContextMiddleware", k=k, max_facts=max_facts)
        self.memory = memory
        self.k, self.max_facts, self.subject = k, max_facts, subject

    def _calls(self, request: ModelRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The profile's and the recall's keyword arguments (no recall without a user message). The
        query is the latest user message, its head when longer than recall takes
        (`memsoda_core.text.message_query`): a long paste must not stop the agent."""
        scope = self.scope.resolve(get_config().get("configurable"))
        profile = {**scope, "subject": self.subject, "max_facts": self.max_facts}
        latest = _latest_human(request.messages)
        if latest is None:
            return profile, None
        recall = {
            **scope,
            "query": message_query(_text(request.messages[latest])),
            "facts_in_context": self.k,
            "conversation": conversation_messages(request.messages[:latest]),
        }
        return profile, recall

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        profile_args, recall_args = self._calls(request)
        profile: Profile = call_sync(self.memory, "profile", **profile_args)
        recalled = None
        if recall_args is not None:
            recalled = call_sync(self.memory, "recall", exclude=profile.fact_ids, **recall_args)
        return handler(_with_context(request, profile, recalled))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        profile_args, recall_args = self._calls(request)
        profile: Profile = await call_async(self.memory, "profile", **profile_args)
        recalled = None
        if recall_args is not None:
            recalled = await call_async(self.memory, "recall", exclude=profile.fact_ids, **recall_args)
        return await handler(_with_context(request, profile, recalled))


def _with_context(request: ModelRequest, profile: Profile, recalled: RecallResult | None) -> ModelRequest:
    """The request with the profile after the system prompt and the recall after the latest user message."""
    overrides: dict[str, Any] = {}
    if profile.text:
        overrides["system_message"] = _with_profile(request.system_message, profile.text)
    latest = _latest_human(request.messages)
    if recalled is not None and recalled.context and latest is not None:
        block = HumanMessage(content=recalled.context, name=RECALL_NAME)
        overrides["messages"] = [*request.messages[: latest + 1], block, *request.messages[latest + 1 :]]
    return request.override(**overrides) if overrides else request


def _with_profile(system: SystemMessage | None, profile: str) -> SystemMessage:
    """The system message with the profile after its instructions, the rest of it kept as it was:
    content blocks (with their `cache_control` breakpoints), `additional_kwargs`, its id."""
    if system is None:
        return SystemMessage(content=profile)
    content = system.content
    if isinstance(content, str):
        joined: str | list[str | dict[str, Any]] = f"{content}\n\n{profile}" if content else profile
    else:
        joined = [*content, {"type": "text", "text": profile}]
    return system.model_copy(update={"content": joined})


def _latest_human(messages: list[AnyMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage) and _text(messages[index]).strip():
            return index
    return None


def _text(message: AnyMessage) -> str:
    return message.text if isinstance(message.text, str) else str(message.content)
