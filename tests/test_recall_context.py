"""Recall with what surrounds the query, against a real store: the date signal (a window the
question names), the conversation signal (`recall(conversation=...)`) and the relevance floor."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from memsoda_core import (
    ArgumentTypeError,
    ConversationOptions,
    DateOptions,
    LimitError,
    LocalEmbedder,
    Memory,
    RecallOptions,
    ScopeArgs,
    ValidationError,
    VectorOptions,
)
from tests.conftest import Either

DATED = [
    {"subject": "user", "predicate": "went", "object": "hiking on mount tamalpais", "valid_at": "2023-05-07"},
    {"subject": "user", "predicate": "went", "object": "to a jazz concert", "valid_at": "2023-03-12"},
    {"subject": "user", "predicate": "went", "object": "swimming at the lake", "valid_at": "2023-08-19"},
    {"subject": "user", "predicate": "likes", "object": "green tea", "valid_at": "2021-01-01"},
    {
        "subject": "user",
        "predicate": "lived in",
        "object": "boston",
        "object_type": "CITY",
        "valid_at": "2015-06-01",
        "invalid_at": "2020-08-01",
    },
    {"subject": "user", "predicate": "lives in", "object": "denver", "object_type": "CITY", "valid_at": "2020-08-01"},
]
AFTER = datetime(2024, 1, 10, tzinfo=UTC)

PLAN = {"subject": "user", "predicate": "is planning", "object": "a two-week trip to kyoto to see the temples"}
OTHERS = [
    {"subject": "user", "predicate": "agreed", "object": "that the plan sounds good and to go ahead with it"},
    {"subject": "user", "predicate": "likes", "object": "going ahead with plans that sound good"},
    {"subject": "user", "predicate": "drives", "object": "a honda civic"},
    {"subject": "user", "predicate": "works as", "object": "a nurse"},
    {"subject": "user", "predicate": "has", "object": "a cat named miso"},
]
FOLLOW_UP = "ok, that sounds good, let's go ahead with it"
CONVERSATION = [
    {"role": "user", "content": "Can you help me work out the temples to visit in Kyoto on my trip?"},
    {"role": "assistant", "content": "Sure: Kinkaku-ji, Fushimi Inari and Kiyomizu-dera make a good start."},
]


def _date_hit(scored: Any) -> Any:
    return next((hit for hit in scored.hits if hit.signal == "date"), None)


async def test_a_fact_valid_then_is_found_by_the_date_and_says_the_window(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    result = await memory.recall("what did I do on 7 May 2023?", **scope, as_of=AFTER, facts_in_context=3)
    top = result.facts[0]
    assert top.fact.text == "user went hiking on mount tamalpais"
    hit = _date_hit(top)
    assert hit is not None and hit.rank == 1
    assert hit.reason.startswith('began in the window the question names: 2023-05-07 to 2023-05-08 ("7 May 2023")')
    assert [scored.fact.text for scored in result.facts if _date_hit(scored)] == [top.fact.text]  # the window alone


async def test_a_fact_that_held_in_the_window_and_ended_since_is_listed(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    undated = await memory.recall("where did I live?", **scope, as_of=AFTER)
    assert "user lived in boston" not in [scored.fact.text for scored in undated.facts]  # not live now
    dated = await memory.recall("where did I live in 2019?", **scope, as_of=AFTER)
    boston = next(scored for scored in dated.facts if scored.fact.text == "user lived in boston")
    hit = _date_hit(boston)
    assert hit is not None and hit.reason.startswith("held, since ended, in the window the question names: 2019-01-01")
    denver = next(scored for scored in dated.facts if scored.fact.text == "user lives in denver")
    assert _date_hit(denver) is None  # began after the window


END_OF_2019 = datetime(2019, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


async def test_a_question_about_what_held_then_reads_memory_as_of_then(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    result = await memory.recall("where did I live in 2019?", **scope)  # asked now
    texts = [scored.fact.text for scored in result.facts]
    assert texts[0] == "user lived in boston"
    assert "user lives in denver" not in texts  # holds now, not then: in no list
    assert {hit.signal for hit in result.facts[0].hits} >= {"vector", "date"}  # live then for every list
    assert result.as_of == END_OF_2019
    assert result.as_of_reason is not None and '"in 2019"' in result.as_of_reason
    assert result.to_dict()["as_of"] == "2019-12-31T23:59:59.999999+00:00"


async def test_an_event_question_or_the_option_off_reads_now(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    off = RecallOptions(as_of_from_question=False)
    event = await memory.recall("what did I do in 2023?", **scope)
    assert event.as_of is None and event.as_of_reason is None
    event_off = await memory.recall("what did I do in 2023?", **scope, options=off)
    assert [s.fact.id for s in event.facts] == [s.fact.id for s in event_off.facts]
    held_off = await memory.recall("where did I live in 2019?", **scope, options=off)
    assert held_off.as_of is None and held_off.as_of_reason is None
    texts = [scored.fact.text for scored in held_off.facts]
    assert "user lives in denver" in texts and "user lived in boston" in texts  # as before: boston by date
    boston = next(scored for scored in held_off.facts if scored.fact.text == "user lived in boston")
    assert set(boston.ranks) == {"date"}


async def test_the_callers_as_of_or_known_at_wins_over_the_question(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    for given in ({"as_of": AFTER}, {"known_at": datetime.now(UTC)}):
        result = await memory.recall("where did I live in 2019?", **scope, **given)
        assert result.as_of == next(iter(given.values())) and result.as_of_reason is None
        assert "user lives in denver" in [scored.fact.text for scored in result.facts]


async def test_no_date_no_date_signal_and_the_option_turns_it_off(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(DATED, **scope)
    plain = await memory.recall("what did I do on the mountain?", **scope, as_of=AFTER)
    assert all(_date_hit(scored) is None for scored in plain.facts)
    off = await memory.recall(
        "what did I do on 7 May 2023?", **scope, as_of=AFTER, options=RecallOptions(date=DateOptions(candidates=0))
    )
    assert all(_date_hit(scored) is None for scored in off.facts)


SHORT_LISTS = RecallOptions(vector=VectorOptions(candidates=2), conversation=ConversationOptions(candidates=2))
"""Lists of two in a memory of six facts: what a list of 50 is in a memory of thousands."""


async def test_a_follow_up_reaches_its_plan_through_the_conversation(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts([PLAN, *OTHERS], **scope)
    alone = await memory.recall(FOLLOW_UP, **scope, options=SHORT_LISTS)
    assert alone.facts and PLAN["object"] not in alone.context
    assert all("conversation" not in scored.ranks for scored in alone.facts)
    followed = await memory.recall(FOLLOW_UP, **scope, options=SHORT_LISTS, conversation=CONVERSATION)
    plan = next(scored for scored in followed.facts if PLAN["object"] in scored.fact.text)
    assert plan.ranks == {"conversation": 1}  # reached through the conversation alone
    assert plan.reasons["conversation"].endswith("to the conversation's recent turns")
    with_query = await memory.recall(
        FOLLOW_UP,
        **scope,
        options=SHORT_LISTS,
        conversation=[*CONVERSATION, {"role": "user", "content": FOLLOW_UP}],
    )
    assert [s.fact.id for s in with_query.facts] == [s.fact.id for s in followed.facts]  # the query itself skipped


@pytest.mark.parametrize(
    "conversation",
    [
        "hello",
        [{"role": "user"}],
        [{"content": "hi"}],
        [{"role": "user", "content": 3}],
        ["hi"],
        {"role": "user", "content": "hi"},
    ],
)
async def test_a_malformed_conversation_is_refused(memory: Either, scope: ScopeArgs, conversation: Any) -> None:
    with pytest.raises(ValidationError, match="conversation"):
        await memory.recall(FOLLOW_UP, **scope, conversation=conversation)


async def test_min_relevance_empties_an_unrelated_recall_only(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts([PLAN, *OTHERS], **scope)
    unrelated = "lattice quantum chromodynamics on GPUs"
    temples = "which temples will I see in kyoto?"
    off = await memory.recall(unrelated, **scope)
    assert off.facts and off.relevance is None  # off by default: always a block, nothing measured
    measured = RecallOptions(min_relevance=0.0)
    far = (await memory.recall(unrelated, **scope, options=measured)).relevance
    near = (await memory.recall(temples, **scope, options=measured)).relevance
    assert far is not None and near is not None and far < near
    floor = RecallOptions(min_relevance=1.0)  # as far above the rest as a fact beside its neighbour
    empty = await memory.recall(unrelated, **scope, options=floor)
    assert empty.context == "" and empty.facts == () and empty.relevance == far < 1.0
    related = await memory.recall(temples, **scope, options=floor)
    assert related.context == (await memory.recall(temples, **scope)).context != ""
    assert related.relevance == near >= 1.0


async def test_options_that_are_not_recall_options_are_refused_at_the_call(
    memory: Either, scope: ScopeArgs, pg_dsn: str, embedder: LocalEmbedder
) -> None:
    with pytest.raises(ArgumentTypeError, match="RecallOptions"):
        await memory.recall(FOLLOW_UP, **scope, options={"anchor.hops": 1})
    with pytest.raises(ArgumentTypeError, match="with_overrides"):
        Memory.open(pg_dsn, embedder, options={"anchor.hops": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("floor", [-0.1, float("nan")])
def test_min_relevance_is_a_share(floor: float) -> None:
    with pytest.raises((LimitError, ArgumentTypeError), match="min_relevance"):
        RecallOptions(min_relevance=floor)


def test_the_adapters_pass_the_conversation(pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from llama_index.core.llms import ChatMessage

    from memsoda_langchain import MemsodaRetriever
    from memsoda_llamaindex import MemsodaMemoryBlock

    with Memory.open(pg_dsn, embedder, options=SHORT_LISTS) as memory:
        memory.add_facts([PLAN, *OTHERS], **scope)
        retriever = MemsodaRetriever(memory=memory, **scope, mode="facts")
        history = [HumanMessage(CONVERSATION[0]["content"]), AIMessage(CONVERSATION[1]["content"])]
        assert PLAN["object"] not in " ".join(doc.page_content for doc in retriever.invoke(FOLLOW_UP))
        followed = retriever.invoke(FOLLOW_UP, conversation=history)
        assert any(PLAN["object"] in doc.page_content for doc in followed)

        block = MemsodaMemoryBlock(memory=memory, **scope)
        question = ChatMessage(role="user", content=FOLLOW_UP)
        assert PLAN["object"] not in asyncio.run(block.aget([question]))
        chat = [ChatMessage(role=m["role"], content=m["content"]) for m in CONVERSATION]
        assert PLAN["object"] in asyncio.run(block.aget([*chat, question]))
