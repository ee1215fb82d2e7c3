"""memsoda behind a LlamaIndex `RetrieverQueryEngine`, offline.

The LLM is LlamaIndex's `MockLLM`, which answers with the prompt it was given, so the output
shows what memsoda retrieved; pass any real LLM (`llm=OpenAI()`) for real answers.
Run: `python examples/llamaindex_query_engine.py`.
"""

from __future__ import annotations

import tempfile

from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from memsoda_core import LocalEmbedder, Memory
from memsoda_llamaindex import MemsodaRetriever

FACTS = [
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "honda civic", "predicate": "has color", "object": "blue", "object_type": "LITERAL"},
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "object_type": "LOCATION"},
    {"subject": "user", "predicate": "works at", "object": "acme corp", "object_type": "ORG"},
]


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="memsoda-example-") as home,
        Memory.open(home=home, embedder=LocalEmbedder()) as memory,
    ):
        memory.add_facts(FACTS, dataset="acme", project="assistant")
        question = "Where does the user work?"

        # "facts" mode: one node per fact, best first, with its fused score.
        facts = MemsodaRetriever(memory=memory, dataset="acme", project="assistant", mode="facts", k=3)
        for hit in facts.retrieve(question):
            print(f"{hit.node.node_id}  score={hit.score:.4f}  {hit.node.get_content()}")

        # "context" mode (default): one node holding the rendered block, fed to the LLM.
        context = MemsodaRetriever(memory=memory, dataset="acme", project="assistant", k=3)
        engine = RetrieverQueryEngine.from_args(context, llm=MockLLM())
        response = engine.query(question)
        print(f"\nQ: {question}\nPrompt the LLM received:\n{response}")


if __name__ == "__main__":
    main()
