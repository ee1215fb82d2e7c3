"""The standing profile (`Memory.profile`) against the real server: byte-identical across unrelated
writes, changed by a relevant one, chosen by its documented rule; and `recall(exclude=...)`, which
keeps the recall block from repeating the profile. Pure parts (rendering, the hash) without I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memsoda_core import LimitError, Profile, ScopeArgs, ValidationError
from memsoda_core.models import Fact
from memsoda_core.options import RecallOptions
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.profile import PROFILE_HEADER, build_profile, profile_statement
from memsoda_core.recall.result import fuse_hits
from tests.conftest import Either

USER_FACTS = [
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "valid_at": "2024-01-01"},
    {"subject": "user", "predicate": "works as", "object": "marine biologist", "valid_at": "2023-05-01"},
    {"subject": "user", "predicate": "is allergic to", "object": "peanuts"},
    {"subject": "user", "predicate": "plays", "object": "the cello", "valid_at": "2022-02-02"},
]


async def test_profile_is_byte_identical_across_unrelated_writes(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts(USER_FACTS, **scope)
    first = await memory.profile(**scope, max_facts=3)
    assert first.text.startswith(PROFILE_HEADER)
    assert len(first.fact_ids) == 3
    # facts about another subject, a user fact ranked below the cut, an ended user fact, a recall
    await memory.add_facts(
        [
            {"subject": "sister", "predicate": "lives in", "object": "porto"},
            {"subject": "lisbon", "predicate": "is in", "object": "portugal"},
            {"subject": "user", "predicate": "likes", "object": "fado", "valid_at": "2025-01-01"},
            {"subject": "user", "predicate": "owned", "object": "a vespa", "invalid_at": "2020-01-01"},
        ],
        **scope,
    )
    await memory.recall("where does the user live?", **scope)
    second = await memory.profile(**scope, max_facts=3)
    assert second.text == first.text
    assert second.version == first.version
    assert second.fact_ids == first.fact_ids


async def test_a_new_single_valued_value_changes_the_profile(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts(USER_FACTS, **scope)
    before = await memory.profile(**scope, max_facts=3)
    assert "user lives in lisbon" in before.text
    await memory.add_facts(
        [{"subject": "user", "predicate": "lives in", "object": "berlin", "valid_at": "2025-06-01"}], **scope
    )
    after = await memory.profile(**scope, max_facts=3)
    assert after.version != before.version
    assert "user lives in berlin" in after.text
    assert "lisbon" not in after.text


async def test_the_rule_single_valued_then_repeated_then_oldest(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    ids = await memory.add_facts(USER_FACTS, **scope)
    lives, works, allergic, plays = ids
    await memory.add_facts([USER_FACTS[3]], **scope)  # the cello, seen twice
    one = await memory.profile(**scope, max_facts=1)
    assert one.fact_ids == (lives,)  # single-valued first
    two = await memory.profile(**scope, max_facts=2)
    assert set(two.fact_ids) == {lives, plays}  # then the most repeated
    three = await memory.profile(**scope, max_facts=3)
    assert set(three.fact_ids) == {lives, plays, works}  # then the older fact (smaller id)
    assert three.fact_ids == tuple(sorted(three.fact_ids))  # rendered in id order
    assert allergic not in three.fact_ids
    assert (await memory.profile(**scope, subject="sister")).text == ""


async def test_recall_excluding_the_profile_does_not_repeat_it(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(USER_FACTS, **scope)
    profile = await memory.profile(**scope, max_facts=2)
    query = "where does the user live and what does the user do?"
    plain = await memory.recall(query, **scope, facts_in_context=4)
    assert set(profile.fact_ids) <= {s.fact.id for s in plain.facts}  # the overlap the option removes
    rest = await memory.recall(query, **scope, facts_in_context=4, exclude=profile.fact_ids)
    kept = {s.fact.id for s in rest.facts}
    assert not kept & set(profile.fact_ids)
    assert len(kept) == 2  # the other two take the freed places
    for fact in profile.facts:
        assert f"{fact.subject} {fact.predicate} {fact.object}" not in rest.context
    assert [s.fact.id for s in (await memory.recall(query, **scope, facts_in_context=4)).facts] == [
        s.fact.id for s in plain.facts
    ]


async def test_bad_arguments_raise_documented_errors(memory: Either, scope: ScopeArgs) -> None:
    with pytest.raises(LimitError):
        await memory.profile(**scope, max_facts=0)
    with pytest.raises(ValidationError):
        await memory.profile(**scope, min_confidence=2.0)
    with pytest.raises(ValidationError):
        await memory.recall("x", **scope, exclude="12")
    with pytest.raises(ValidationError):
        await memory.recall("x", **scope, exclude=[1.5])


def test_profile_sql_binds_every_value() -> None:
    text = profile_statement("memsoda").as_string(None)
    for name in ("dataset", "project", "subject", "max_facts", "min_confidence", "at"):
        assert f"%({name})s" in text
    assert "ORDER BY sv.predicate IS NOT NULL DESC, f.times_seen DESC, f.confidence DESC, f.id" in text


def _fact(fact_id: int, obj: str, times_seen: int = 1) -> Fact:
    return Fact(
        id=fact_id,
        dataset="d",
        project="p",
        subject="user",
        predicate="likes",
        object=obj,
        object_type="CONCEPT",
        anchor="user",
        anchor_type="PERSON",
        mentions=(),
        valid_at=datetime(2024, 1, 2, tzinfo=UTC),
        invalid_at=None,
        confidence=1.0,
        source_quote=None,
        created_at=datetime(2024, 1, 2, tzinfo=UTC),
        times_seen=times_seen,
    )


def test_rendering_is_in_id_order_and_the_version_follows_the_text() -> None:
    a, b = _fact(7, "tea"), _fact(3, "jazz\nnew line")
    built = build_profile([a, b])
    assert isinstance(built, Profile)
    assert built.fact_ids == (3, 7)
    assert built.text.splitlines()[-2:] == [
        "- user likes jazz new line  (valid: 2024-01-02 – present)",
        "- user likes tea  (valid: 2024-01-02 – present)",
    ]
    assert build_profile([b, a]) == built
    seen_more = build_profile([_fact(7, "tea", times_seen=5), b])
    assert seen_more.text == built.text and seen_more.version == built.version  # rank, not text
    assert build_profile([a]).version != built.version
    assert build_profile([]).text == ""


def test_exclusion_drops_facts_before_the_cut_and_leaves_the_others_scores() -> None:
    rows = [
        HitRow("vector", 7, 1, 1_700_000_000_000_000, similarity=0.9),
        HitRow("vector", 8, 2, 1_700_000_000_000_001, similarity=0.8),
        HitRow("keyword", 7, 1, 1_700_000_000_000_000, matched=["honda"]),
        HitRow("keyword", 9, 2, 1_800_000_000_000_000, matched=["civic"]),
        HitRow("vector", 10, 3, 1_600_000_000_000_000, similarity=0.1),
    ]
    options = RecallOptions(facts_in_context=2)
    plain = {k.fact_id: k.score for k in fuse_hits(rows, RecallOptions(facts_in_context=4))}
    kept = fuse_hits(rows, options, exclude=frozenset({7}))
    assert [k.fact_id for k in kept] == [9, 8]  # 7 is gone; the next two take its place
    assert all(k.score == plain[k.fact_id] for k in kept)
    assert [k.fact_id for k in fuse_hits(rows, options)] == [7, 9]  # without exclude, as before
