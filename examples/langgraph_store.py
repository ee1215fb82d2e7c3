"""memsoda as a LangGraph store, offline: an agent saves a memory in one conversation with
langmem's `manage_memory` tool and finds it in the next with `search_memory`, each user in a
memsoda scope of their own.

The agent is `langchain.agents.create_agent(model, tools, store=MemsodaStore(memory,
project="langgraph"))`. The model is LangChain's `GenericFakeChatModel` with a script (call a tool,
then answer), since no model runs here; a real one is `init_chat_model("openai:gpt-4.1-mini")`,
and the store, the tools and the agent stay as they are. Run: `python examples/langgraph_store.py`.
"""

from __future__ import annotations

import tempfile
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langmem import create_manage_memory_tool, create_search_memory_tool

from memsoda_core import LocalEmbedder, Memory
from memsoda_langgraph import MemsodaStore


class ScriptedModel(GenericFakeChatModel):
    """Replies from a script, tool calls included; binding tools changes nothing."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


# What a tool-calling model would do: save what the user said, later search for it and answer.
SCRIPT = [
    AIMessage(
        "", tool_calls=[{"name": "manage_memory", "id": "c1", "args": {"content": "User is allergic to shellfish"}}]
    ),
    AIMessage("Got it, no shellfish."),
    AIMessage("", tool_calls=[{"name": "search_memory", "id": "c2", "args": {"query": "food allergies"}}]),
    AIMessage("You told me you are allergic to shellfish, so skip the paella."),
]


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="memsoda-example-") as home,
        Memory.open(home=home, embedder=LocalEmbedder()) as memory,
    ):
        print("(the model's replies are scripted: no model runs here; the tools and the store are real)")
        store = MemsodaStore(memory, project="langgraph")
        namespace = ("memories", "{langgraph_user_id}")
        tools = [create_manage_memory_tool(namespace=namespace), create_search_memory_tool(namespace=namespace)]
        agent = create_agent(ScriptedModel(messages=iter(SCRIPT)), tools=tools, store=store)
        config = {"configurable": {"langgraph_user_id": "alice"}}
        for turn in ("I'm allergic to shellfish.", "Can I order the seafood paella?"):
            print(f"=== new conversation: {turn}")
            done = agent.invoke({"messages": [HumanMessage(turn)]}, config)
            for message in done["messages"][1:]:
                message.pretty_print()
        print("=== what memsoda holds for alice, and where")
        for item in store.search(("memories", "alice")):
            print(f"{item.namespace} {item.key[:8]}… {item.value}  scope={store.scope(item.namespace)}")


if __name__ == "__main__":
    main()
