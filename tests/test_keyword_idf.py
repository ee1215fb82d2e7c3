"""The keyword signal's rule (issue 20): a fact holds min(ceil(n/2), `keyword.min_terms`) of the
query's n search lexemes and is ranked by the summed IDF of those it holds, IDF from the scope's
per-lexeme fact counts."""

from __future__ import annotations

from typing import Any

import pytest

from memsoda_core import (
    AnchorOptions,
    EntitiesOptions,
    KeywordOptions,
    LimitError,
    RecallOptions,
    RecallResult,
    ScopeArgs,
)
from tests.conftest import Either


def keyword(result: RecallResult) -> list[str]:
    """The keyword list's facts, by keyword rank."""
    hits = [s for s in result.facts if "keyword" in s.ranks]
    return [s.fact.text for s in sorted(hits, key=lambda s: s.ranks["keyword"])]


def note(text: str) -> dict[str, Any]:
    return {"subject": "user", "predicate": "noted", "object": text, "object_type": "LITERAL"}


LONG_QUERY = (
    "okay so I was thinking again about the whole thing with my sourdough starter and honestly "
    "the kitchen is cold lately so maybe we can adjust the feeding plan we talked about"
)


async def test_a_long_message_finds_the_notes_sharing_two_of_its_words(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [
            note("sourdough starter is fed twice a day with rye flour"),  # sourdough, starter, fed
            note("kitchen heating is broken until march"),  # kitchen only: one term
            note("plan to visit the coast in june"),  # plan only
        ],
        **scope,
    )
    result = await memory.recall(LONG_QUERY, **scope)
    assert keyword(result) == ["user noted sourdough starter is fed twice a day with rye flour"]
    assert by_reason(result, "sourdough").startswith("matched terms: sourdough, starter")
    half = await memory.recall(LONG_QUERY, **scope, options=RecallOptions(keyword=KeywordOptions(min_terms=64)))
    assert keyword(half) == []  # the half rule: no note holds ~10 of the message's lexemes
    one = await memory.recall(LONG_QUERY, **scope, options=RecallOptions(keyword=KeywordOptions(min_terms=1)))
    assert len(keyword(one)) == 3


def by_reason(result: RecallResult, word: str) -> str:
    hit = next(s for s in result.facts if word in s.fact.text and "keyword" in s.ranks)
    return next(h.reason for h in hit.hits if h.signal == "keyword")


async def test_rarer_shared_words_rank_first(memory: Either, scope: ScopeArgs) -> None:
    # "walk" is in 6 facts, "dog" in 7, "vet" and "limp" in one each: IDF puts the rare pair first,
    # though the common pair's fact repeats its words (ts_rank would count the repeats)
    facts = [note(f"walk the dog at {hour} o'clock") for hour in range(5)]
    facts.append(note("dog walk dog walk dog walk every morning"))
    facts.append(note("the vet said the limp is from an old dog injury"))
    await memory.add_facts(facts, **scope)
    result = await memory.recall("my dog has a limp after the walk, should I call the vet", **scope)
    ranked = keyword(result)
    assert ranked[0] == "user noted the vet said the limp is from an old dog injury"
    assert "user noted dog walk dog walk dog walk every morning" in ranked[1:]


async def test_short_queries_keep_the_half_rule(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts([note("green tea in kyoto"), note("green paint"), note("kyoto trip")], **scope)
    two = await memory.recall("green kyoto", **scope)  # n = 2: one term is enough
    assert set(keyword(two)) == {"user noted green tea in kyoto", "user noted green paint", "user noted kyoto trip"}
    assert keyword(two)[0] == "user noted green tea in kyoto"  # both terms: the larger IDF sum
    three = await memory.recall("green kyoto tea", **scope)  # n = 3: two terms needed
    assert keyword(three) == ["user noted green tea in kyoto"]


def test_keyword_min_terms_is_bounded() -> None:
    for bad in (0, 65):
        with pytest.raises(LimitError, match=r"keyword\.min_terms"):
            RecallOptions(keyword=KeywordOptions(min_terms=bad))


# --- anchors only on real names (issue 20, item 3) -------------------------------------------------


async def test_filler_words_are_never_anchors_or_bridges(memory: Either, scope: ScopeArgs) -> None:
    # an extractor took "The", "I'm" and "A" for names; a query's filler words must not reach them
    junk = ["the", "i'm", "a"]
    facts = [
        {"subject": f"meeting {i}", "predicate": "discussed", "object": f"topic {i}", "mentions": junk}
        for i in range(6)
    ]
    facts.append({**note("the pasta recipe uses fresh basil"), "mentions": ["the", "basil"]})
    facts.append({**note("user grows basil on the balcony"), "mentions": ["basil"]})
    await memory.add_facts(facts, **scope)
    options = RecallOptions(entities=EntitiesOptions(hub_min_share=1.0, hub_min_facts=1000))  # nothing is a hub here
    result = await memory.recall("I'm wondering what the best thing to cook is", **scope, options=options)
    # "the" and "i'm" are named in the query but are no names: no anchor through them (an entity
    # near the query, by the gap rule, may still anchor: "basil" for cooking)
    reasons = [s.reasons["anchor"] for s in result.facts if "anchor" in s.ranks]
    assert not [r for r in reasons if "named in the query" in r or "'the'" in r or "'i'm'" in r], reasons
    basil = await memory.recall("what do I do with basil", **scope, options=options)
    by_text = {s.fact.text: s.reasons.get("anchor") for s in basil.facts}
    assert by_text["user noted user grows basil on the balcony"] == "touches 'basil', named in the query"
    # the second hop never goes through "the" (which the pasta fact also touches)
    assert all(reason is None for text, reason in by_text.items() if text.startswith("meeting"))


async def test_a_word_the_scope_does_not_use_as_a_name_is_no_named_anchor(memory: Either, scope: ScopeArgs) -> None:
    # the note writer capitalised "Day" once ("Day 3"), and the extractor took it for a name; the
    # scope's text holds "day" in seven facts, one linked to it. "Kyoto" is linked wherever it is.
    facts = [note(f"walk for {10 + i} minutes every day") for i in range(6)]
    facts.append({**note("Day 3 of the plan is a rest day"), "mentions": ["Day"]})
    facts += [{**note(text), "mentions": ["Kyoto"]} for text in ("trip to Kyoto in june", "ryokan booked in Kyoto")]
    await memory.add_facts(facts, **scope)
    options = RecallOptions(entities=EntitiesOptions(hub_min_share=1.0, hub_min_facts=1000))  # nothing is a hub here
    query = "what did we say about day 3 and kyoto"

    def anchors(result: RecallResult) -> set[str]:
        """The named anchors the anchor list went through (not its second hop's bridges)."""
        return {s.reasons["anchor"] for s in result.facts if s.reasons.get("anchor", "").endswith("named in the query")}

    named = anchors(await memory.recall(query, **scope, options=options))
    assert named == {"touches 'kyoto', named in the query"}
    untested = anchors(
        await memory.recall(
            query,
            **scope,
            options=RecallOptions(
                entities=EntitiesOptions(hub_min_share=1.0, hub_min_facts=1000), anchor=AnchorOptions(name_share=0.0)
            ),
        )
    )
    assert "touches 'day', named in the query" in untested
    with pytest.raises(LimitError):
        RecallOptions(anchor=AnchorOptions(name_share=1.5))


async def test_a_longer_name_is_never_judged_by_its_shared_words(memory: Either, scope: ScopeArgs) -> None:
    # "eva" and "smith" are each in six facts' text, "eva smith" linked to one: the words' counts
    # bound the facts holding the whole name loosely, so a longer name is not tested
    facts = [{**note(f"Anna Smith called about visit {i}"), "mentions": ["Anna Smith"]} for i in range(5)]
    facts += [{**note(f"Eva Jones sent photo {i}"), "mentions": ["Eva Jones"]} for i in range(5)]
    facts.append({**note("Eva Smith moved to Porto"), "mentions": ["Eva Smith"]})
    await memory.add_facts(facts, **scope)
    result = await memory.recall(
        "anything new from eva smith", **scope, options=RecallOptions(entities=EntitiesOptions(hub_min_share=1.0))
    )
    reasons = {s.fact.text: s.reasons.get("anchor") for s in result.facts}
    assert reasons["user noted Eva Smith moved to Porto"] == "touches 'eva smith', named in the query"
