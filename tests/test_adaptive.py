"""The fusion a memory chooses from its statistics (`recall.adaptive`, `recall.scope_stats`): the
pure rule, and on a real server a first-person scope, a scope of triples, and a caller's options."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from memsoda_core import FIRST_PERSON_OPTIONS, RecallOptions, ScopeArgs
from memsoda_core.errors import LimitError
from memsoda_core.models import ScopeStats
from memsoda_core.options import (
    ADAPTIVE,
    DEFAULT_OPTIONS,
    GENERAL_OPTIONS,
    AnchorOptions,
    KeywordOptions,
    RecentOptions,
)
from memsoda_core.recall.adaptive import MIN_SAMPLED, NOTE_LEXEMES, ONE_SUBJECT_SHARE, choose, first_person
from memsoda_core.recall.remembered import ticket
from memsoda_core.recall.result import statement_params
from memsoda_core.recall.scope_stats import SAMPLE_FACTS, ScopeStatsCache, grown, sample_of, stats_of
from memsoda_core.recall.signals import RecallRequest
from memsoda_core.scope_growth import Growth, LatestFact
from memsoda_core.validation import Scope
from tests.conftest import Either

NOTES = ScopeStats(sampled=120, subject_share=1.0, lexemes_per_fact=22.0, restated_share=0.02)
TRIPLES = ScopeStats(sampled=120, subject_share=0.85, lexemes_per_fact=5.0, restated_share=0.0)


def test_defaults_leave_the_adaptive_options_to_the_memory() -> None:
    assert DEFAULT_OPTIONS.left_to_memory() == ADAPTIVE
    assert GENERAL_OPTIONS.left_to_memory() == () and FIRST_PERSON_OPTIONS.left_to_memory() == ()
    assert RecallOptions(keyword=KeywordOptions(min_terms=2)).left_to_memory() == (
        "recent.candidates",
        "anchor.name_share",
    )


def test_first_person_notes_get_the_first_person_options() -> None:
    options, choice = choose(DEFAULT_OPTIONS, NOTES)
    assert choice is not None and choice.preset == "first_person" and choice.stats == NOTES
    assert {name: options.value(name) for name in ADAPTIVE} == {
        name: FIRST_PERSON_OPTIONS.value(name) for name in ADAPTIVE
    }
    assert "sentences" in choice.reason


def test_triples_keep_the_general_options() -> None:
    options, choice = choose(DEFAULT_OPTIONS, TRIPLES)
    assert choice is not None and choice.preset == "general"
    assert (options.recent.candidates, options.keyword.min_terms, options.anchor.name_share) == (0, 2, 0.5)
    assert "triples" in choice.reason


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, True),
        ({"sampled": MIN_SAMPLED - 1}, False),  # too few to tell
        ({"lexemes_per_fact": NOTE_LEXEMES - 0.1}, False),  # short facts: triples
        ({"subject_share": ONE_SUBJECT_SHARE - 0.01}, False),  # notes about many subjects
        ({"sampled": MIN_SAMPLED, "lexemes_per_fact": NOTE_LEXEMES, "subject_share": ONE_SUBJECT_SHARE}, True),
    ],
)
def test_each_condition_of_the_rule(change: dict[str, Any], expected: bool) -> None:
    assert first_person(replace(NOTES, **change)) is expected


def test_the_callers_options_stand() -> None:
    mine = RecallOptions(recent=RecentOptions(candidates=0), anchor=AnchorOptions(hops=1))
    options, choice = choose(mine, NOTES)
    assert choice is not None and choice.chosen == ("keyword.min_terms", "anchor.name_share")
    assert options.recent.candidates == 0 and options.anchor.hops == 1
    assert (options.keyword.min_terms, options.anchor.name_share) == (1, 0.9)
    assert choose(FIRST_PERSON_OPTIONS, TRIPLES) == (FIRST_PERSON_OPTIONS, None)  # all set: no choice


def test_no_query_takes_the_general_values_without_statistics() -> None:
    options, choice = choose(DEFAULT_OPTIONS, None)
    assert choice is not None and choice.stats is None and choice.preset == "general"
    assert options.left_to_memory() == ()


def test_statement_params_never_bind_none() -> None:
    from datetime import UTC, datetime

    params = statement_params(
        RecallRequest(
            scope=Scope(dataset="d", project="p"),
            query="q words here",
            embedding=None,
            at=datetime(2026, 1, 1, tzinfo=UTC),
            options=DEFAULT_OPTIONS,
            text_search_config="english",
        )
    )
    assert params["keyword_min_terms"] == 2 and params["anchor_name_share"] == 0.5


def test_stats_of_the_latest_facts() -> None:
    assert stats_of([]).sampled == 0
    latest = [
        LatestFact(id=n, subject_id=1 if n <= 6 else n, lexemes=10 + n, times_seen=2 if n <= 2 else 1)
        for n in range(1, 9)
    ]
    stats = stats_of(latest)
    assert (stats.sampled, stats.subject_share, stats.lexemes_per_fact, stats.restated_share) == (8, 0.75, 14.5, 0.25)


def test_a_sample_grows_by_what_a_write_reports() -> None:
    """The write's facts become the latest, the oldest leave a full sample, and a stored fact
    written again counts once more: the same sample a read after the write would give."""
    stored = [LatestFact(id=n, subject_id=n % 3, lexemes=5, times_seen=1) for n in range(1, SAMPLE_FACTS + 11)]
    added = (
        LatestFact(id=300, subject_id=7, lexemes=20, times_seen=1),
        LatestFact(id=301, subject_id=7, lexemes=20, times_seen=2),
    )
    growth = Growth(facts=len(stored) + 2, added=added, restated=((150, 2), (1, 1)))  # fact 1 is not in the sample
    written_again = {150: 3}
    after = [replace(f, times_seen=written_again.get(f.id, f.times_seen)) for f in stored] + list(added)
    assert grown(sample_of(stored), growth) == sample_of(after)
    small = sample_of(stored[:3])
    assert grown(small, Growth(facts=4, added=added[:1])).stats.sampled == 4  # a sample not yet full keeps every fact


def test_stats_cache_expires_forgets_and_grows_within_its_time() -> None:
    scope = Scope(dataset="d", project="p")
    sample = sample_of([LatestFact(id=1, subject_id=1, lexemes=5, times_seen=1)])
    cache = ScopeStatsCache(ttl_s=60.0)
    cache.put(scope, sample)
    assert cache.get(scope) == sample
    cache.grow(scope, [Growth(facts=2, added=(LatestFact(id=2, subject_id=1, lexemes=7, times_seen=1),))], ticket())
    grown_sample = cache.get(scope)
    assert grown_sample is not None and grown_sample.stats.sampled == 2 and grown_sample.stats.lexemes_per_fact == 6.0
    cache.forget(scope)
    assert cache.get(scope) is None
    cache.grow(scope, [Growth(facts=3)], ticket())  # nothing remembered: nothing to grow
    assert cache.get(scope) is None
    expired = ScopeStatsCache(ttl_s=0.0)
    expired.put(scope, sample)
    assert expired.get(scope) is None


def test_a_value_read_around_a_write_is_never_taken_for_one_the_write_can_correct() -> None:
    """A value read before a write began is not remembered once the write has begun (it may not
    hold the write); a write's report grows only a value read before the write began, and drops
    one read since (it may hold the write already)."""
    scope = Scope(dataset="d", project="p")
    one = sample_of([LatestFact(id=1, subject_id=1, lexemes=5, times_seen=1)])
    growth = Growth(facts=2, added=(LatestFact(id=2, subject_id=1, lexemes=7, times_seen=1),))
    cache = ScopeStatsCache(ttl_s=60.0)
    read_before = ticket()
    cache.writing(scope, began := ticket())
    cache.put(scope, one, read_before)
    assert cache.get(scope) is None
    cache.put(scope, one, read_after := ticket())
    assert read_after > began and cache.get(scope) == one
    cache.grow(scope, [growth], began)  # the value may hold the write: dropped, read again
    assert cache.get(scope) is None
    cache.put(scope, one, ticket())
    cache.writing(scope, later := ticket())
    cache.grow(scope, [growth], later)
    grown_sample = cache.get(scope)
    assert grown_sample is not None and [fact.id for fact in grown_sample.latest] == [2, 1]


def test_bad_adaptive_values_still_raise() -> None:
    with pytest.raises(LimitError):
        RecallOptions(recent=RecentOptions(candidates=-1))
    with pytest.raises(LimitError):
        RecallOptions(anchor=AnchorOptions(name_share=2.0))


NOTE_TEXTS = [
    "prefers running early in the morning along the river before work when the weather is cool",
    "is training for the Lisbon half marathon in April and follows a plan of four runs each week",
    "switched from a standing desk to a treadmill desk because long meetings left the back sore",
    "wants vegetarian dinner ideas that take under thirty minutes after the evening swim practice",
    "mentioned that the younger sister starts university in Porto next autumn studying architecture",
    "keeps a reading list of history books and is halfway through a long biography of Magellan",
    "asked about learning Portuguese phrases before the trip and practises with an app every evening",
    "is saving money for a new road bike and compares carbon frames against aluminium ones carefully",
    "dislikes crowded gyms and would rather do bodyweight training at home with a simple kettlebell",
    "plans to visit grandparents in the countryside during the summer holidays for about two weeks",
    "started a sourdough starter last month and bakes a loaf every weekend for the whole family",
    "finds that coffee after three in the afternoon ruins sleep so switched to herbal tea instead",
]


async def test_a_first_person_scope_gets_the_first_person_fusion(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(
        [{"subject": "user", "predicate": "noted", "object": text, "object_type": "LITERAL"} for text in NOTE_TEXTS],
        **scope,
    )
    result = await memory.recall("what should I cook after swimming tonight?", **scope)
    assert result.fusion is not None and result.fusion.preset == "first_person"
    assert result.fusion.stats is not None and result.fusion.stats.sampled == len(NOTE_TEXTS)
    assert result.fusion.chosen == ADAPTIVE
    assert "recent" in {signal for s in result.facts for signal in s.ranks}  # the recency list fused
    assert result.to_dict()["fusion"]["preset"] == "first_person"
    # the caller's options win: the recency list off stays off, the rest is still chosen
    mine = await memory.recall(
        "what should I cook after swimming tonight?", **scope, options=RecallOptions(recent=RecentOptions(candidates=0))
    )
    assert "recent" not in {signal for s in mine.facts for signal in s.ranks}
    assert mine.fusion is not None and mine.fusion.chosen == ("keyword.min_terms", "anchor.name_share")
    fixed = await memory.recall("what should I cook after swimming tonight?", **scope, options=GENERAL_OPTIONS)
    assert fixed.fusion is None


async def test_a_scope_of_triples_keeps_the_general_fusion(memory: Either, scope: ScopeArgs) -> None:
    people = ["alice", "bob", "carol", "dave", "erin", "frank"]
    await memory.add_facts(
        [
            {"subject": person, "predicate": "lives in", "object": city}
            for person, city in zip(people, ["paris", "rome", "oslo", "lima", "kyiv", "cairo"], strict=True)
        ]
        + [{"subject": person, "predicate": "works at", "object": f"{person} labs"} for person in people],
        **scope,
    )
    result = await memory.recall("where does carol live?", **scope)
    assert result.fusion is not None and result.fusion.preset == "general"
    assert result.fusion.stats is not None and result.fusion.stats.lexemes_per_fact < NOTE_LEXEMES
    assert "recent" not in {signal for s in result.facts for signal in s.ranks}
    assert result.facts[0].fact.text == "carol lives in oslo"
    empty_query = await memory.recall(None, **scope)
    assert empty_query.fusion is not None and empty_query.fusion.stats is None
