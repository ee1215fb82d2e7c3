"""A single-valued relation's whole history, against the real server: a value written into the
middle of it (backdated, between two values, or with its own end) leaves at most one value at
every valid time, and the latest-started value holds from its start, whatever the order of the
writes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from memsoda_core import IntervalError, LocalEmbedder, Memory, ScopeArgs
from memsoda_core.validation import validate_facts
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from tests.conftest import Either

LIVES = {"subject": "user", "predicate": "lives in", "object_type": "PLACE"}


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def lives(city: str, start: str, end: str | None = None) -> dict[str, Any]:
    return {**LIVES, "object": city, "valid_at": start, **({"invalid_at": end} if end else {})}


async def live_cities(memory: Either, scope: ScopeArgs, at: datetime) -> list[str]:
    return sorted(f.object for f in (await memory.list_facts(**scope, as_of=at)).facts)


async def assert_one_value_at_a_time(memory: Either, scope: ScopeArgs) -> None:
    """No two stored facts of the relation are valid at one instant."""
    facts = (await memory.list_facts(**scope, predicate="lives in", status="all", limit=100)).facts
    far = datetime.max.replace(tzinfo=UTC)
    spans = sorted((f.valid_at or datetime.min.replace(tzinfo=UTC), f.invalid_at or far, f.object) for f in facts)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        assert end <= start, f"{first} and {second} overlap: {spans}"


def expected_city(writes: Sequence[tuple[str, str, str | None]], at: datetime) -> list[str]:
    """The latest-started value holds from its start until its own end (if given) or the next start."""
    started = [(day(start), city, end) for city, start, end in writes if day(start) <= at]
    if not started:
        return []
    _start, city, end = max(started)
    return [] if end is not None and at >= day(end) else [city]


async def test_a_backdated_value_ends_where_the_next_value_starts(memory: Either, scope: ScopeArgs) -> None:
    """The reviewer's repro: porto, written last with the earliest start, ends where lisbon starts."""
    await memory.set_single_valued(["lives in"], **scope)
    (lisbon,) = await memory.add_facts([lives("lisbon", "2019-01-01")], **scope)
    (berlin,) = await memory.add_facts([lives("berlin", "2025-04-01")], **scope)
    (porto,) = await memory.add_facts([lives("porto", "2010-01-01")], **scope)
    stored = await memory.get_fact(porto, **scope)
    assert (stored.invalid_at, stored.superseded_by) == (day("2019-01-01"), lisbon)
    assert (await memory.get_fact(lisbon, **scope)).superseded_by == berlin  # the rest of the history is kept
    assert await live_cities(memory, scope, day("2022-06-01")) == ["lisbon"]
    recalled = await memory.recall("where do I live?", **scope, as_of="2022-06-01")
    assert [s.fact.object for s in recalled.facts] == ["lisbon"]
    assert await live_cities(memory, scope, day("2015-01-01")) == ["porto"]
    await assert_one_value_at_a_time(memory, scope)


async def test_a_value_between_two_others_ends_the_earlier_one_at_its_start(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    lisbon, berlin = await memory.add_facts([lives("lisbon", "2019-01-01"), lives("berlin", "2025-04-01")], **scope)
    before = await memory.get_fact(lisbon, **scope)
    (madrid,) = await memory.add_facts([lives("madrid", "2022-01-01")], **scope)
    shortened, inserted = await memory.get_fact(lisbon, **scope), await memory.get_fact(madrid, **scope)
    assert (shortened.invalid_at, shortened.superseded_by) == (day("2022-01-01"), madrid)
    assert shortened.expired_at == before.expired_at  # memory learned then that lisbon had ended
    assert (inserted.invalid_at, inserted.superseded_by) == (day("2025-04-01"), berlin)
    assert [f.object for f in await memory.history(lisbon, **scope)] == ["lisbon", "madrid", "berlin"]
    await assert_one_value_at_a_time(memory, scope)


async def test_a_value_with_its_own_end_shortens_the_one_it_interrupts(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    (lisbon,) = await memory.add_facts([lives("lisbon", "2019-01-01")], **scope)
    (rome,) = await memory.add_facts([lives("rome", "2020-01-01", "2021-01-01")], **scope)
    assert (await memory.get_fact(lisbon, **scope)).invalid_at == day("2020-01-01")
    assert (await memory.get_fact(rome, **scope)).invalid_at == day("2021-01-01")
    assert await live_cities(memory, scope, day("2022-01-01")) == []  # lisbon does not come back
    # an end given past the next value's start is cut there
    (oslo,) = await memory.add_facts([lives("oslo", "2018-01-01", "2030-01-01")], **scope)
    cut = await memory.get_fact(oslo, **scope)
    assert (cut.invalid_at, cut.superseded_by) == (day("2019-01-01"), lisbon)
    await assert_one_value_at_a_time(memory, scope)


async def test_a_value_starting_with_an_ended_one_is_an_error(memory: Either, scope: ScopeArgs) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("lisbon", "2019-01-01"), lives("berlin", "2025-04-01")], **scope)
    with pytest.raises(IntervalError, match="2019-01-01"):
        await memory.add_facts([lives("porto", "2019-01-01")], **scope)
    # the same value at the same start is what the history already says
    ids = await memory.add_facts([lives("lisbon", "2019-01-01"), lives("lisbon", "2020-01-01")], **scope)
    assert len(set(ids)) == 1
    assert len((await memory.list_facts(**scope, status="all")).facts) == 2


WRITES: list[tuple[str, str, str | None]] = [
    ("porto", "2010-01-01", None),
    ("lisbon", "2019-01-01", None),
    ("rome", "2021-06-01", "2022-06-01"),
    ("berlin", "2025-04-01", None),
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(len(WRITES)))))
async def test_any_order_of_writes_leaves_the_same_history(
    memory: Either, scope: ScopeArgs, order: tuple[int, ...]
) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    for i in order:
        await memory.add_facts([lives(*WRITES[i])], **scope)
    await assert_one_value_at_a_time(memory, scope)
    starts = [day(start) for _, start, _ in WRITES] + [day(end) for _, _, end in WRITES if end]
    moments = sorted({m + delta for m in starts for delta in (timedelta(0), timedelta(days=-1), timedelta(days=1))})
    for at in moments:
        assert await live_cities(memory, scope, at) == expected_city(WRITES, at), at


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 3, 0, 2)])
async def test_one_batch_in_any_order_leaves_the_same_history(
    memory: Either, scope: ScopeArgs, order: tuple[int, ...]
) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives(*WRITES[i]) for i in order], **scope)
    await assert_one_value_at_a_time(memory, scope)
    for _, start, _ in WRITES:
        assert await live_cities(memory, scope, day(start)) == expected_city(WRITES, day(start))


async def test_an_equal_value_said_with_an_earlier_start_moves_back_over_free_time_only(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("lisbon", "2019-01-01", "2021-01-01")], **scope)
    (berlin,) = await memory.add_facts([lives("berlin", "2025-04-01")], **scope)
    assert await memory.add_facts([lives("berlin", "2020-01-01")], **scope) == [berlin]
    assert (await memory.get_fact(berlin, **scope)).valid_at == day("2021-01-01")  # where lisbon ended
    await assert_one_value_at_a_time(memory, scope)
    assert await live_cities(memory, scope, day("2020-06-01")) == ["lisbon"]


def test_concurrent_writers_into_one_history_leave_one_value_at_a_time(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs
) -> None:
    """Each writer reads the relation's history under its lock (`lock_relations`), so writers
    placing values into it take turns: whatever order they commit in, the history is the rule's."""
    writes = [(f"city {i}", f"{2000 + (i * 7) % 24}-01-01", None) for i in range(24)]  # starts in a scrambled order
    vector = embedder.embed_documents(["x"])[0]
    with Memory.open(pg_dsn, embedder, pool_size=8) as memory, ThreadPoolExecutor(max_workers=8) as pool:
        memory.set_single_valued(["lives in"], **scope)
        futures = [pool.submit(memory.add_facts, [lives(*write)], **scope, vectors=[vector]) for write in writes]
        for future in futures:
            future.result()
        either = Either(memory)
        asyncio.run(assert_one_value_at_a_time(either, scope))
        for _, start, _ in writes:
            at = day(start) + timedelta(days=1)
            assert sorted(f.object for f in memory.list_facts(**scope, as_of=at).facts) == expected_city(writes, at)


async def test_a_value_without_a_start_after_ended_values_starts_when_memory_learns_it(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("lisbon", "2019-01-01", "2021-01-01")], **scope)
    (porto,) = await memory.add_facts([{**LIVES, "object": "porto"}], **scope)
    stored = await memory.get_fact(porto, **scope)
    assert stored.valid_at is not None and stored.valid_at == stored.created_at
    await assert_one_value_at_a_time(memory, scope)
    assert await live_cities(memory, scope, day("2020-01-01")) == ["lisbon"]


async def test_an_equal_value_without_a_start_moves_back_to_where_the_last_value_ended(
    memory: Either, scope: ScopeArgs
) -> None:
    """A write without a start reads what holds when memory learns it and the value that ended last
    (`met_facts`), not the whole history: enough to move the live start back over free time only."""
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("rome", "2010-01-01", "2015-01-01")], **scope)
    await memory.add_facts([lives("lisbon", "2019-01-01", "2021-01-01")], **scope)
    (berlin,) = await memory.add_facts([lives("berlin", "2025-04-01")], **scope)
    assert await memory.add_facts([{**LIVES, "object": "berlin"}], **scope) == [berlin]
    assert (await memory.get_fact(berlin, **scope)).valid_at == day("2021-01-01")
    await assert_one_value_at_a_time(memory, scope)


async def test_an_equal_value_without_a_start_moves_back_to_the_end_of_an_ended_run_of_its_own_value(
    memory: Either, scope: ScopeArgs
) -> None:
    """The value that ended last is berlin's own: the live berlin moves back to its end, not over
    it to rome's (it moved to 2015, and berlin held twice from 2016 to 2018)."""
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("rome", "2010-01-01", "2015-01-01")], **scope)
    (ended,) = await memory.add_facts([lives("berlin", "2016-01-01", "2018-01-01")], **scope)
    (berlin,) = await memory.add_facts([lives("berlin", "2025-04-01")], **scope)
    assert await memory.add_facts([{**LIVES, "object": "berlin"}], **scope) == [berlin]
    assert (await memory.get_fact(berlin, **scope)).valid_at == day("2018-01-01")
    await assert_one_value_at_a_time(memory, scope)
    assert [f.id for f in (await memory.list_facts(**scope, as_of="2017-01-01")).facts] == [ended]
    assert await live_cities(memory, scope, day("2012-01-01")) == ["rome"]


@pytest.mark.parametrize("start", [None, "2005-01-01", "2017-01-01"])
async def test_an_equal_value_never_moves_back_over_an_ended_run_of_its_own_value(
    memory: Either, scope: ScopeArgs, start: str | None
) -> None:
    """berlin 2016-2018, then berlin again from 2025: a write of berlin (no start, or one before
    either run) moves the live run back to 2018 at most; it went to the unknown start, or to 2005,
    over the ended run (two facts of berlin at once). In one batch with the live run too."""
    await memory.set_single_valued(["lives in"], **scope)
    write = {**LIVES, "object": "berlin", **({"valid_at": start} if start else {})}
    (ended,) = await memory.add_facts([lives("berlin", "2016-01-01", "2018-01-01")], **scope)
    (berlin,) = await memory.add_facts([lives("berlin", "2025-04-01")], **scope)
    assert await memory.add_facts([write], **scope) == [berlin]
    assert (await memory.get_fact(berlin, **scope)).valid_at == day("2018-01-01")
    await assert_one_value_at_a_time(memory, scope)
    other: ScopeArgs = {**scope, "project": "batch"}
    await memory.set_single_valued(["lives in"], **other)
    await memory.add_facts([lives("berlin", "2016-01-01", "2018-01-01")], **other)
    (batched, again) = await memory.add_facts([lives("berlin", "2025-04-01"), write], **other)
    assert batched == again and (await memory.get_fact(batched, **other)).valid_at == day("2018-01-01")
    await assert_one_value_at_a_time(memory, other)
    assert ended != batched


async def test_a_value_without_a_start_after_ended_facts_of_its_own_value_starts_when_memory_learns_it(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.set_single_valued(["lives in"], **scope)
    await memory.add_facts([lives("berlin", "2016-01-01", "2018-01-01")], **scope)
    (berlin,) = await memory.add_facts([{**LIVES, "object": "berlin"}], **scope)
    stored = await memory.get_fact(berlin, **scope)
    assert stored.valid_at is not None and stored.valid_at == stored.created_at
    await assert_one_value_at_a_time(memory, scope)


def test_a_write_without_a_start_reads_what_holds_when_memory_learns_it_not_the_whole_history(
    pg_dsn: str, sync_memory: Memory, scope: ScopeArgs
) -> None:
    """`met_facts` of an open input without a start: the live value and the one that ended last
    (of another value: the same here), however long the history (a write read all of it, and its
    cost grew with it: bench/RESULTS.md, "A long single-valued history's write cost")."""
    sync_memory.set_single_valued(["lives in"], **scope)
    ids = sync_memory.add_facts([lives(f"city {year}", f"{year}-01-01") for year in range(2000, 2012)], **scope)
    undated = validate_facts([{**LIVES, "object": "oslo"}])
    params = {
        **scope,
        **inserts.fact_arrays(undated, sql_reconcile.MET_FIELDS),
        "singles": [False],
        "learned_at": datetime.now(UTC),
    }
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(sql_reconcile.met_facts("memsoda"), params).fetchall()
    met = [sql_reconcile.Met(*row) for row in rows]
    assert [(m.id, m.same, m.invalid_at) for m in met] == [(ids[-2], False, day("2011-01-01")), (ids[-1], False, None)]


@pytest.mark.parametrize("seed", range(6))
async def test_writes_with_and_without_a_start_keep_one_value_at_a_time(
    memory: Either, scope: ScopeArgs, seed: int
) -> None:
    rng = random.Random(seed)
    await memory.set_single_valued(["lives in"], **scope)
    for _ in range(14):
        city = rng.choice(["lisbon", "porto", "berlin", "rome"])
        dated = lives(city, f"{2000 + rng.randrange(20)}-0{1 + rng.randrange(9)}-01")
        write = dated if rng.random() < 0.6 else {**LIVES, "object": city}  # no start: when memory learns it
        with contextlib.suppress(IntervalError):  # another value with the same start
            await memory.add_facts([write], **scope)
        await assert_one_value_at_a_time(memory, scope)
    assert len(await live_cities(memory, scope, datetime.now(UTC))) <= 1
