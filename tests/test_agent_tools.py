"""`memsoda_langchain.memory_tools` in real agents, offline: LangChain's `create_agent` and
LangGraph's prebuilt ReAct agent driving LangChain's fake chat model (scripted tool calls). An
agent saves a fact in one session and recalls it, with its id, in the next; corrects and ends
facts by id; memsoda's errors come back to the model as tool answers and change nothing."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.prebuilt import create_react_agent

from memsoda_core import Memory
from memsoda_langchain import memory_tools
from tests.conftest import Either
from tests.scripted_extractor import ScriptedExtractor, add, answer


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to bind tools (it answers with the scripted messages)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def calls(*steps: tuple[str, dict[str, Any]], final: str = "Done.") -> ToolCallingFakeChatModel:
    script = [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])
        for i, (name, args) in enumerate(steps)
    ]
    return ToolCallingFakeChatModel(messages=iter([*script, AIMessage(final)]))


def tool_answers(state: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_an_agent_learns_in_one_session_and_recalls_in_the_next(memory: Either, scope: dict[str, str]) -> None:
    tools = memory_tools(memory.raw, **scope)
    saving = create_agent(
        calls(("save_memory", {"subject": "user", "predicate": "drives", "object": "honda civic"})), tools
    )
    first = await saving.ainvoke({"messages": [{"role": "user", "content": "I drive a Honda Civic."}]})
    assert tool_answers(first)[0].startswith("Saved as fact(s)")
    recalling = create_agent(calls(("recall_memory", {"query": "what car does the user drive?", "k": 3})), tools)
    second = await recalling.ainvoke({"messages": [{"role": "user", "content": "What do I drive?"}]})
    (shown,) = tool_answers(second)
    (fact,) = (await memory.list_facts(**scope)).facts
    assert f"[{fact.id}] user drives honda civic (valid " in shown


async def test_correct_and_end_by_id(memory: Either, scope: dict[str, str]) -> None:
    lives, job = await memory.add_facts(
        [
            {"subject": "user", "predicate": "lives in", "object": "amsterdam", "valid_at": "2020-01-01"},
            {"subject": "user", "predicate": "works at", "object": "asml", "valid_at": "2020-01-01"},
        ],
        **scope,
    )
    agent = create_agent(
        calls(
            ("correct_memory", {"fact_id": lives, "subject": "user", "predicate": "lives in", "object": "utrecht"}),
            ("end_memory", {"fact_id": job, "ended_at": "2026-01-31"}),
            ("end_memory", {"fact_id": 10**12}),
            ("end_memory", {"fact_id": job}),
        ),
        memory_tools(memory.raw, **scope),
    )
    state = await agent.ainvoke({"messages": [{"role": "user", "content": "I moved to Utrecht and quit ASML."}]})
    corrected, ended, missing, again = tool_answers(state)
    assert corrected.startswith(f"Fact {lives} is replaced by fact ") and ended == f"Fact {job} has ended."
    assert "NotFoundError" in missing and "NotLiveError" in again
    live = await memory.list_facts(**scope)
    assert [f.object for f in live.facts] == ["utrecht"]
    assert (await memory.get_fact(job, **scope)).invalid_at is not None


def test_a_sentence_is_saved_through_the_extractor(sync_memory: Memory, scope: dict[str, str]) -> None:
    extractor = ScriptedExtractor(answer(add("I", "is allergic to", "peanuts", "allergic to peanuts")))
    agent = create_react_agent(
        calls(("save_memory", {"text": "Remember that I am allergic to peanuts."})),
        memory_tools(sync_memory, **scope, extractor=extractor),
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "I am allergic to peanuts."}]})
    assert tool_answers(state)[0].startswith("Saved as fact(s)")
    (fact,) = sync_memory.list_facts(**scope).facts
    assert fact.text == "user is allergic to peanuts"
    without = create_react_agent(calls(("save_memory", {"text": "I like tea."})), memory_tools(sync_memory, **scope))
    (refused,) = tool_answers(without.invoke({"messages": [{"role": "user", "content": "I like tea."}]}))
    assert "no extractor" in refused
    assert len(sync_memory.list_facts(**scope).facts) == 1
