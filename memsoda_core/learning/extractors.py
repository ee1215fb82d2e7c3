"""Extractors: a chat model that turns a window of messages into memory operations.

`remember` accepts anything `as_extractor` does: an `Extractor` (the protocol below), an
`OpenAIExtractor` (any OpenAI-compatible endpoint: OpenAI, Azure, Ollama, vLLM through `base_url`),
a LangChain chat model (its `with_structured_output`), or a LlamaIndex LLM (JSON in its reply).
Framework objects are recognised by duck typing, so the core never imports a framework. An
extractor returns the answer raw (a mapping or JSON text); `learning.operations` checks it.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Literal, Protocol, runtime_checkable

from memsoda_core.errors import ConfigurationError
from memsoda_core.learning.prompt import ExtractionRequest, chat_messages, load_prompt, render_prompt
from memsoda_core.learning.schema import SCHEMA_NAME, extraction_schema
from memsoda_core.model_protocols import CompletionModelLike, StructuredChatModelLike

JSON_ONLY = "\n\nAnswer with one JSON object that follows this JSON Schema, and nothing else:\n"


@runtime_checkable
class Extractor(Protocol):
    """Turns an `ExtractionRequest` into an answer of `learning.schema.extraction_schema`."""

    def extract(self, request: ExtractionRequest) -> Any: ...

    async def aextract(self, request: ExtractionRequest) -> Any: ...


class OpenAIExtractor:
    """Chat completions on an OpenAI-compatible endpoint, with the extraction schema as strict
    structured output (`mode="json_schema"`) or as a forced tool call (`mode="tools"`, for servers
    without structured output). API errors propagate; `remember` raises them as ExtractionError."""

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        mode: Literal["json_schema", "tools"] = "json_schema",
        prompt: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
        max_retries: int = 1,
    ) -> None:
        from memsoda_core.embedders.openai import openai_clients

        if mode not in ("json_schema", "tools"):
            raise ConfigurationError(f"mode must be 'json_schema' or 'tools', got {mode!r}")
        self._client, self._aclient = openai_clients(
            "OpenAIExtractor", model, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self._model, self._mode, self._template = model, mode, load_prompt(prompt)

    @property
    def model(self) -> str:
        return self._model

    def _request(self, request: ExtractionRequest) -> dict[str, Any]:
        schema = extraction_schema(request.user)
        body: dict[str, Any] = {"model": self._model, "messages": list(chat_messages(self._template, request))}
        if self._mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
            }
        else:
            function = {"name": SCHEMA_NAME, "description": schema["description"], "parameters": schema}
            body["tools"] = [{"type": "function", "function": function}]
            body["tool_choice"] = {"type": "function", "function": {"name": SCHEMA_NAME}}
        return body

    def _answer(self, response: Any) -> Any:
        choices = getattr(response, "choices", None)
        if not choices:
            raise ValueError(f"chat model {self._model} returned no choices")
        message = choices[0].message
        if self._mode == "tools":
            calls = getattr(message, "tool_calls", None) or []
            if not calls:
                raise ValueError(f"chat model {self._model} made no tool call")
            return calls[0].function.arguments
        if getattr(message, "refusal", None):
            raise ValueError(f"chat model {self._model} refused: {message.refusal}")
        return message.content

    def extract(self, request: ExtractionRequest) -> Any:
        return self._answer(self._client.chat.completions.create(**self._request(request)))

    async def aextract(self, request: ExtractionRequest) -> Any:
        return self._answer(await self._aclient.chat.completions.create(**self._request(request)))

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        self._client.close()
        await self._aclient.close()


class LangChainExtractor:
    """A LangChain chat model asked for the extraction schema through `with_structured_output`
    (tool calling or the provider's JSON mode, as the model implements it)."""

    def __init__(self, model: Any, *, prompt: str | os.PathLike[str] | None = None, **structured: Any) -> None:
        if not callable(getattr(model, "with_structured_output", None)):
            raise ConfigurationError(f"LangChainExtractor needs a LangChain chat model, got {type(model).__name__}")
        self._model, self._structured, self._template = model, structured, load_prompt(prompt)

    def _runnable(self, request: ExtractionRequest) -> Any:
        return self._model.with_structured_output(extraction_schema(request.user), **self._structured)

    def extract(self, request: ExtractionRequest) -> Any:
        return self._runnable(request).invoke(list(chat_messages(self._template, request)))

    async def aextract(self, request: ExtractionRequest) -> Any:
        return await self._runnable(request).ainvoke(list(chat_messages(self._template, request)))


class LlamaIndexExtractor:
    """A LlamaIndex LLM given the prompt and the schema, its completion read as JSON (fenced or
    not): this works with any LLM, with or without function calling."""

    def __init__(self, llm: Any, *, prompt: str | os.PathLike[str] | None = None) -> None:
        if not callable(getattr(llm, "complete", None)):
            raise ConfigurationError(f"LlamaIndexExtractor needs a LlamaIndex LLM, got {type(llm).__name__}")
        self._llm, self._template = llm, load_prompt(prompt)

    def _prompt(self, request: ExtractionRequest) -> str:
        schema = json.dumps(extraction_schema(request.user), separators=(",", ":"))
        return render_prompt(self._template, request) + JSON_ONLY + schema

    def extract(self, request: ExtractionRequest) -> Any:
        return self._llm.complete(self._prompt(request)).text

    async def aextract(self, request: ExtractionRequest) -> Any:
        if callable(getattr(self._llm, "acomplete", None)):
            return (await self._llm.acomplete(self._prompt(request))).text
        return await asyncio.to_thread(self.extract, request)


ExtractorLike = Extractor | StructuredChatModelLike | CompletionModelLike
"""What `remember(extractor=...)` and `Memory.open(extractor=...)` accept."""


def as_extractor(model: ExtractorLike | None) -> Extractor | None:
    """An `Extractor`, a LangChain chat model or a LlamaIndex LLM, as an Extractor; None stays None."""
    if model is None or isinstance(model, Extractor):
        return model
    if callable(getattr(model, "with_structured_output", None)) and callable(getattr(model, "invoke", None)):
        return LangChainExtractor(model)
    if callable(getattr(model, "complete", None)):
        return LlamaIndexExtractor(model)
    raise ConfigurationError(
        "extractor must have extract()/aextract(), be a LangChain chat model (with_structured_output) "
        f"or a LlamaIndex LLM (complete); got {type(model).__name__}"
    )
