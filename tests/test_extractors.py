"""The extractors on their real protocols, with scripted models: the OpenAI wire protocol over HTTP
(`tests/fake_openai.py`, structured output and tool calling), a LangChain chat model's structured
output (tool calls of LangChain's fake chat model), and a LlamaIndex LLM's completion. Also the
prompt file and the schema derived from `FactInput`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.llms import MockLLM

from memsoda_core import (
    ConfigurationError,
    ExtractionError,
    FactInput,
    LangChainExtractor,
    LlamaIndexExtractor,
    Memory,
    OpenAIExtractor,
    ScopeArgs,
)
from memsoda_core.learning import PROMPT_VERSION, extraction_schema, load_prompt
from memsoda_core.learning.schema import MODEL_FIELDS
from tests.conftest import Either
from tests.fake_openai import FakeOpenAI, Fault
from tests.scripted_extractor import add, answer

WINDOW = [{"role": "user", "content": "I started learning the cello in September.", "timestamp": "2026-10-02"}]
CELLO = answer(
    add("I", "is learning", "the cello", "I started learning the cello", object_type="LITERAL", valid_at="2026-09-01")
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(chat_content=json.dumps(CELLO)) as server:
        yield server


@pytest.mark.parametrize("mode", ["json_schema", "tools"])
async def test_openai_extractor_over_http(memory: Either, scope: ScopeArgs, fake: FakeOpenAI, mode: Any) -> None:
    extractor = OpenAIExtractor("fake-chat", base_url=fake.base_url, mode=mode)
    try:
        result = await memory.remember(WINDOW, **scope, extractor=extractor)
    finally:
        await extractor.aclose()
    (fact_id,) = result.added
    assert (await memory.get_fact(fact_id, **scope)).object == "the cello"
    (sent,) = fake.requests("chat")
    assert "I started learning the cello in September." in sent.messages[0]["content"]
    if mode == "json_schema":
        assert sent.body["response_format"]["json_schema"]["strict"] is True
        assert sent.body["response_format"]["json_schema"]["schema"] == extraction_schema()
    else:
        assert sent.body["tool_choice"]["function"]["name"] == sent.body["tools"][0]["function"]["name"]


async def test_openai_errors_and_timeouts_raise_extraction_error(
    memory: Either, scope: ScopeArgs, fake: FakeOpenAI
) -> None:
    extractor = OpenAIExtractor("fake-chat", base_url=fake.base_url, max_retries=0, timeout=0.5)
    try:
        await failing_calls(memory, scope, fake, extractor)
    finally:
        await extractor.aclose()
    assert (await memory.list_facts(**scope)).facts == ()


async def failing_calls(memory: Either, scope: ScopeArgs, fake: FakeOpenAI, extractor: OpenAIExtractor) -> None:
    fake.fail(500, endpoint="chat")
    with pytest.raises(ExtractionError, match="failed"):
        await memory.remember(WINDOW, **scope, extractor=extractor)
    fake.slow(2.0, endpoint="chat")
    with pytest.raises(ExtractionError):
        await memory.remember(WINDOW, **scope, extractor=extractor)
    fake.push(Fault(chat_content='{"operations": [ {"op": "add"'), endpoint="chat")
    with pytest.raises(ExtractionError, match="not valid JSON"):
        await memory.remember(WINDOW, **scope, extractor=extractor)


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to bind tools (it answers with the scripted messages)."""

    bound: list[Any] = []  # noqa: RUF012 (a pydantic field)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound.append((tools, kwargs))
        return self


def tool_call_reply(args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "memsoda_extraction", "args": args, "id": "call-1"}])


async def test_langchain_extractor_uses_structured_output(memory: Either, scope: ScopeArgs) -> None:
    model = ToolCallingFakeChatModel(messages=iter([tool_call_reply(CELLO)]), bound=[])
    result = await memory.remember(WINDOW, **scope, extractor=model)  # a chat model is taken as it is
    assert len(result.added) == 1
    ((tools, _),) = model.bound
    assert tools[0]["title"] == "memsoda_extraction"
    assert isinstance(LangChainExtractor(model), LangChainExtractor)


class ScriptedLLM(MockLLM):
    """A LlamaIndex mock LLM that completes with a scripted text."""

    reply: str = ""
    prompts: list[str] = []  # noqa: RUF012 (a pydantic field)

    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply, self.prompts = reply, []

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.reply)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.complete(prompt, formatted, **kwargs)


async def test_llamaindex_extractor_reads_json_from_the_completion(memory: Either, scope: ScopeArgs) -> None:
    llm = ScriptedLLM("Here you go:\n```json\n" + json.dumps(CELLO) + "\n```")
    result = await memory.remember(WINDOW, **scope, extractor=llm)
    assert len(result.added) == 1
    assert '"memsoda_extraction"' in llm.prompts[0]  # the schema is in the prompt
    with pytest.raises(ExtractionError):  # LlamaIndex's MockLLM echoes the prompt: not JSON
        await memory.remember(WINDOW, **scope, extractor=LlamaIndexExtractor(MockLLM()))


def test_the_schema_is_derived_from_the_fact_model() -> None:
    names = {field.name for field in dataclasses.fields(FactInput)}
    assert set(MODEL_FIELDS) == names - {"anchor", "single_valued"}
    fact = extraction_schema()["properties"]["operations"]["items"]["properties"]["fact"]["anyOf"][0]
    assert list(fact["properties"]) == [f.name for f in dataclasses.fields(FactInput) if f.name in MODEL_FIELDS]
    assert fact["properties"]["mentions"]["type"] == "array"
    assert fact["properties"]["confidence"]["type"] == "number"

    def strict(node: Any) -> None:  # OpenAI strict mode: every object closed, every property required
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False and set(node["required"]) == set(node["properties"])
            for value in node.values():
                strict(value)
        elif isinstance(node, list):
            for value in node:
                strict(value)

    strict(extraction_schema())
    sam = extraction_schema("sam")["properties"]["operations"]["items"]["properties"]["fact"]["anyOf"][0]
    assert '"sam"' in sam["properties"]["subject"]["description"]


def test_the_prompt_is_a_versioned_overridable_file(tmp_path: Path) -> None:
    packaged = load_prompt()
    assert PROMPT_VERSION == "extract-v1" and "$messages" in packaged and "$facts" in packaged
    assert load_prompt("Facts: $facts\nChat: $messages") == "Facts: $facts\nChat: $messages"
    path = tmp_path / "mine.md"
    path.write_text("Chat: $messages", encoding="utf-8")
    assert load_prompt(path) == "Chat: $messages"
    path.write_text("no placeholder", encoding="utf-8")
    with pytest.raises(ConfigurationError):
        load_prompt(path)
    with pytest.raises(ConfigurationError):
        load_prompt(tmp_path / "missing.md")


def test_the_demo_learns_only_with_a_real_model(
    sync_memory: Memory, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from memsoda_core.demo_learning import show_learning

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    console = Console(record=True, width=200)
    assert show_learning(sync_memory, console)
    said = console.export_text()
    assert "Set OPENAI_API_KEY" in said and "learned" not in said
    reply = answer(add("I", "works at", "philips", "I started a new job at Philips", object_type="ORGANIZATION"))
    fake.chat_content = json.dumps(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    console = Console(record=True, width=200)
    assert show_learning(sync_memory, console)
    said = console.export_text()
    assert "learned [" in said and "user works at philips" in said
    assert fake.requests("chat")  # the model was really asked
