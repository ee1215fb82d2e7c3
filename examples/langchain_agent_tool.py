"""memsoda as a tool for a LangChain agent (`create_retriever_tool`), offline.

The agent loop is the plain tool-calling loop: ask the model, run the tools it calls, feed back
the results, repeat until it answers. The model is LangChain's `GenericFakeChatModel` with a
script (call the memory tool, then answer); a real model would be `ChatOpenAI().bind_tools(tools)`
or `langchain.agents.create_agent(model, tools)`. Run: `python examples/langchain_agent_tool.py`.
"""

from __future__ import annotations

import tempfile

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import create_retriever_tool

from memsoda_core import LocalEmbedder, Memory
from memsoda_langchain import MemsodaRetriever

FACTS = [
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "honda civic", "predicate": "has color", "object": "blue", "object_type": "LITERAL"},
    {"subject": "user", "predicate": "works at", "object": "acme corp", "object_type": "ORG"},
    {"subject": "user", "predicate": "prefers", "object": "green tea", "object_type": "LITERAL"},
]

# What a tool-calling model would do here: call the memory tool, then answer from what it returned.
SCRIPT = [
    AIMessage(
        "", tool_calls=[{"name": "recall_memory", "args": {"query": "colour of the user's car"}, "id": "call_1"}]
    ),
    AIMessage("You drive a blue Honda Civic."),
]


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="memsoda-example-") as home,
        Memory.open(home=home, embedder=LocalEmbedder()) as memory,
    ):
        memory.add_facts(FACTS, dataset="acme", project="assistant")
        tool = create_retriever_tool(
            MemsodaRetriever(memory=memory, dataset="acme", project="assistant", k=4),
            "recall_memory",
            "Look up long-term facts about the user. Input: a short search query.",
        )
        tools = {tool.name: tool}
        model = GenericFakeChatModel(messages=iter(SCRIPT))
        messages: list[BaseMessage] = [HumanMessage("What colour is my car?")]
        while True:
            reply = model.invoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                break
            for call in reply.tool_calls:
                messages.append(tools[call["name"]].invoke(call))  # a ToolMessage with the context
        for message in messages:
            message.pretty_print()


if __name__ == "__main__":
    main()
