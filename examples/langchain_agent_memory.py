"""A LangChain agent (`langchain.agents.create_agent`) with memsoda's memory tools, offline: in one
session it saves what the user said, in the next it recalls it (with the fact's id and dates).

The model is LangChain's fake chat model playing a script of tool calls; with a real model use
`create_agent("openai:gpt-4o-mini", memory_tools(...))` and it decides the calls itself.
Run: `python examples/langchain_agent_memory.py`.
"""

from __future__ import annotations

import tempfile
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from memsoda_core import LocalEmbedder, Memory
from memsoda_langchain import memory_tools

SCOPE = {"dataset": "alice", "project": "assistant"}


class ScriptedChatModel(GenericFakeChatModel):
    """Plays its script whatever tools it is given (a real model chooses the calls)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def scripted(name: str, args: dict[str, Any], final: str) -> ScriptedChatModel:
    call = AIMessage("", tool_calls=[{"name": name, "args": args, "id": "call-1"}])
    return ScriptedChatModel(messages=iter([call, AIMessage(final)]))


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="memsoda-example-") as home,
        Memory.open(home=home, embedder=LocalEmbedder()) as memory,
    ):
        tools = memory_tools(memory, **SCOPE)
        save = {
            "subject": "user",
            "predicate": "is allergic to",
            "object": "peanuts",
            "text": "I'm allergic to peanuts",
        }
        sessions = [
            ("I'm allergic to peanuts, remember that.", scripted("save_memory", save, "Noted.")),
            ("Can I eat satay?", scripted("recall_memory", {"query": "food allergies"}, "Better not: peanuts.")),
        ]
        for number, (said, model) in enumerate(sessions, start=1):
            agent = create_agent(model, tools)  # a fresh agent and conversation per session
            state = agent.invoke({"messages": [{"role": "user", "content": said}]})
            print(f"=== session {number} ===")
            for message in state["messages"]:
                message.pretty_print()


if __name__ == "__main__":
    main()
