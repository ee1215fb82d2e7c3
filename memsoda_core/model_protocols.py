"""What memsoda accepts as a language model without importing a framework: the methods of a LangChain
chat model and of a LlamaIndex LLM it calls, as protocols (static types only: `as_extractor` and
`as_synthesizer` recognise them at run time by the same method names)."""

from __future__ import annotations

from typing import Any, Protocol


class ChatModelLike(Protocol):
    """A LangChain chat model (`BaseChatModel`): `invoke` on a prompt."""

    def invoke(self, input: Any, /) -> Any: ...


class StructuredChatModelLike(ChatModelLike, Protocol):
    """A LangChain chat model that can answer in a schema (`with_structured_output`)."""

    def with_structured_output(self, schema: Any, /) -> Any: ...


class CompletionModelLike(Protocol):
    """A LlamaIndex LLM: `complete` on a prompt."""

    def complete(self, prompt: str, /) -> Any: ...
