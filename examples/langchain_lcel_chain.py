"""memsoda in a LangChain LCEL chain, offline.

    question -> MemsodaRetriever (recalled context) -> prompt -> chat model -> text

The chat model is LangChain's `ParrotFakeChatModel`, which answers with the prompt it was given,
so the output shows exactly what memsoda put in front of the model. Swap in a real chat model
(e.g. `ChatOpenAI()`) for real answers. Run: `python examples/langchain_lcel_chain.py`.
"""

from __future__ import annotations

import tempfile

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from memsoda_core import LocalEmbedder, Memory
from memsoda_langchain import MemsodaRetriever

FACTS = [
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "honda civic", "predicate": "has color", "object": "blue", "object_type": "LITERAL"},
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "object_type": "LOCATION"},
    {"subject": "user", "predicate": "has sister", "object": "ana", "object_type": "PERSON"},
    {"subject": "ana", "predicate": "lives in", "object": "porto", "object_type": "LOCATION"},
]
PROMPT = ChatPromptTemplate.from_messages(
    [("human", "Answer from what you know about the user.\n\n{context}\n\nQuestion: {question}")]
)


def as_context(docs: list[Document]) -> str:
    """The context Document's text ("context" mode returns no Document when nothing matched)."""
    return docs[0].page_content if docs else "(nothing known)"


def main() -> None:
    # A throwaway embedded PostgreSQL under a temporary home, removed at the end.
    with (
        tempfile.TemporaryDirectory(prefix="memsoda-example-") as home,
        Memory.open(home=home, embedder=LocalEmbedder()) as memory,
    ):
        memory.add_facts(FACTS, dataset="acme", project="assistant")
        retriever = MemsodaRetriever(memory=memory, dataset="acme", project="assistant", k=4)
        chain = (
            {"context": retriever | as_context, "question": RunnablePassthrough()}
            | PROMPT
            | ParrotFakeChatModel()
            | StrOutputParser()
        )
        question = "What colour is my car?"
        print(f"Q: {question}\n")
        print("Prompt the model received:")
        print(chain.invoke(question))


if __name__ == "__main__":
    main()
