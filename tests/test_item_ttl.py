"""Item TTLs in the core (`put_items(ttl_minutes=)`, `refresh_ttl`, `sweep_items`) and in
`MemsodaStore` as LangGraph's PostgresStore has them (langgraph-checkpoint-postgres 3.2: its
`sweep_ttl`, `start_ttl_sweeper`, `stop_ttl_sweeper` and refresh on read; it is not installed
here, and LangGraph's InMemoryStore has no TTL to compare with): a put's TTL or the config's
`default_ttl`, refresh on get and search per `refresh_on_read` or the call's `refresh_ttl`, and
the sweep (by hand and by the sweeper) that deletes expired items with their facts. Against the
real server, with a Memory and an AsyncMemory."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack

import pytest
from langgraph.store.base import TTLConfig

from memsoda_core import AsyncMemory, NotFoundError, ScopeArgs, ValidationError
from memsoda_langgraph import MemsodaStore
from tests.conftest import Either

NS = ["notes"]


@pytest.fixture
def scope() -> ScopeArgs:
    """A scope in a project of its own: a sweep at a later time would reach other tests' items."""
    return {"dataset": "ds", "project": f"ttl-{uuid.uuid4().hex[:10]}"}


def item(key: str, text: str | None, ttl: float | None = None) -> dict[str, Any]:
    found = {"namespace": NS, "key": key, "value": {"text": text}, "text": text}
    return found if ttl is None else {**found, "ttl_minutes": ttl}


async def test_expiry_refresh_and_sweep_of_items(memory: Either, scope: ScopeArgs) -> None:
    kept_id, swept_id, forever_id = await memory.put_items(
        [item("kept", "tea", 60), item("swept", "coffee", 60), item("forever", "water")], **scope
    )
    kept, swept = await memory.get_item(NS, "kept", **scope), await memory.get_item(NS, "swept", **scope)
    assert kept.expires_at - kept.updated_at == timedelta(minutes=60)
    assert (await memory.get_item(NS, "forever", **scope)).expires_at is None
    assert (await memory.get_item(NS, "kept", **scope)).expires_at == kept.expires_at  # a plain read keeps it
    # the swept item's text changed once: its past text's fact goes with it
    (swept_id,) = await memory.put_items([item("swept", "black coffee", 60)], **scope)
    swept = await memory.get_item(NS, "swept", **scope)
    refreshed = await memory.get_item(NS, "kept", **scope, refresh_ttl=True)
    assert refreshed.expires_at > swept.expires_at > kept.expires_at and refreshed.updated_at == kept.updated_at
    old_fact = (await memory.list_facts(**scope, status="ended")).facts[0].id
    assert await memory.sweep_items(project=scope["project"], at=kept.expires_at - timedelta(seconds=1)) == 0
    assert await memory.sweep_items(project=scope["project"], at=swept.expires_at) == 1
    assert await memory.get_item(NS, "swept", **scope) is None
    for gone in (swept_id, old_fact):
        with pytest.raises(NotFoundError):
            await memory.get_fact(gone, **scope)
    assert {f.id for f in (await memory.list_facts(**scope, status="all")).facts} == {kept_id, forever_id}
    # a search refreshes what it finds
    (found,) = await memory.search_items(NS, **scope, query="tea", limit=1, refresh_ttl=True)
    assert found.key == "kept" and found.expires_at > refreshed.expires_at and found.score is not None


async def test_a_fact_another_item_refers_to_outlives_the_expired_item(memory: Either, scope: ScopeArgs) -> None:
    fact_id, same = await memory.put_items([item("a", "tea", 1), {**item("b", "tea"), "key": "b"}], **scope)
    assert same == fact_id
    a = await memory.get_item(NS, "a", **scope)
    assert await memory.sweep_items(project=scope["project"], at=a.expires_at) == 1
    assert (await memory.get_fact(fact_id, **scope)).invalid_at is None
    assert (await memory.get_item(NS, "b", **scope)).fact_id == fact_id


async def test_a_sweep_keeps_a_fact_the_application_wrote(memory: Either, scope: ScopeArgs) -> None:
    """An expired item that shared a fact the application wrote leaves it live; the item's past
    text, which that fact superseded, goes with the item."""
    (mine,) = await memory.add_facts(
        [{"subject": "user", "predicate": "noted", "object": "tea", "object_type": "LITERAL"}], **scope
    )
    (past,) = await memory.put_items([item("a", "coffee", 1)], **scope)
    assert await memory.put_items([item("a", "tea", 1)], **scope) == [mine]
    assert (await memory.get_fact(past, **scope)).superseded_by == mine
    a = await memory.get_item(NS, "a", **scope)
    assert await memory.sweep_items(project=scope["project"], at=a.expires_at) == 1
    assert (await memory.get_fact(mine, **scope)).invalid_at is None
    with pytest.raises(NotFoundError):
        await memory.get_fact(past, **scope)


async def test_ttl_arguments_are_checked(memory: Either, scope: ScopeArgs) -> None:
    for ttl in (0, -1, float("nan"), True, "5"):
        with pytest.raises(ValidationError):
            await memory.put_items([item("k", "x", ttl)], **scope)  # type: ignore[arg-type]  # "5": no number, on purpose
    with pytest.raises(ValidationError):
        await memory.get_item(NS, "k", **scope, refresh_ttl="yes")


# --- MemsodaStore ---------------------------------------------------------------------------------


class Store:
    """A MemsodaStore called through its sync or async API the same way (`await s.put(...)`)."""

    def __init__(self, store: MemsodaStore, *, is_async: bool) -> None:
        self.raw, self.is_async = store, is_async

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.is_async:
                return await getattr(self.raw, "a" + name)(*args, **kwargs)
            return getattr(self.raw, name)(*args, **kwargs)

        return call


def store_on(memory: Either, **ttl: Unpack[TTLConfig]) -> Store:
    store = MemsodaStore(memory.raw, project=f"lg-{uuid.uuid4().hex[:10]}", ttl=ttl or None)
    return Store(store, is_async=isinstance(memory.raw, AsyncMemory))


async def expiry(memory: Either, store: Store, namespace: tuple[str, ...], key: str) -> Any:
    found = await memory.get_item(namespace, key, **store.raw.scope(namespace))
    return None if found is None else found.expires_at


NAMESPACE = ("memories", "u1")


async def test_store_ttl_default_put_and_refresh_on_read(memory: Either) -> None:
    store = store_on(memory, default_ttl=30.0)
    assert store.raw.supports_ttl
    await store.put(NAMESPACE, "default", {"content": "likes tea"})
    await store.put(NAMESPACE, "given", {"content": "likes chess"}, ttl=5)
    await store.put(NAMESPACE, "never", {"content": "likes cats"}, ttl=None)
    first = await memory.get_item(NAMESPACE, "default", **store.raw.scope(NAMESPACE))
    assert first.expires_at - first.updated_at == timedelta(minutes=30)
    given = await memory.get_item(NAMESPACE, "given", **store.raw.scope(NAMESPACE))
    assert given.expires_at - given.updated_at == timedelta(minutes=5)
    assert await expiry(memory, store, NAMESPACE, "never") is None
    await store.get(NAMESPACE, "default", refresh_ttl=False)
    assert await expiry(memory, store, NAMESPACE, "default") == first.expires_at
    assert (await store.get(NAMESPACE, "default")).value == {"content": "likes tea"}  # refresh_on_read: True
    after_get = await expiry(memory, store, NAMESPACE, "default")
    assert after_get > first.expires_at
    (hit,) = await store.search(NAMESPACE, query="tea", limit=1)
    assert hit.key == "default" and await expiry(memory, store, NAMESPACE, "default") > after_get


async def test_store_refresh_on_read_off(memory: Either) -> None:
    store = store_on(memory, refresh_on_read=False)
    await store.put(NAMESPACE, "k", {"content": "likes tea"}, ttl=10)
    before = await expiry(memory, store, NAMESPACE, "k")
    await store.get(NAMESPACE, "k")
    await store.search(NAMESPACE, query="tea")
    assert await expiry(memory, store, NAMESPACE, "k") == before
    await store.get(NAMESPACE, "k", refresh_ttl=True)
    assert await expiry(memory, store, NAMESPACE, "k") > before


async def test_store_sweep_deletes_expired_items_and_their_facts(memory: Either) -> None:
    store = store_on(memory, default_ttl=60.0)
    await store.put(NAMESPACE, "brief", {"content": "parked on level 3"}, ttl=1e-6)  # 60 µs
    await store.put(NAMESPACE, "long", {"content": "likes tea"})
    scope = store.raw.scope(NAMESPACE)
    brief_fact = (await memory.get_item(NAMESPACE, "brief", **scope)).fact_id
    assert await store.sweep_ttl() == 1
    assert await store.get(NAMESPACE, "brief") is None
    with pytest.raises(NotFoundError):
        await memory.get_fact(brief_fact, **scope)
    assert [i.key for i in await store.search(NAMESPACE, query="where did I park?")] == ["long"]
    assert await store.sweep_ttl() == 0


async def test_store_sweeper_runs_until_stopped(memory: Either) -> None:
    store = store_on(memory, sweep_interval_minutes=1)
    await store.put(NAMESPACE, "brief", {"content": "parked on level 3"}, ttl=1e-6)
    if store.is_async:
        task = await store.raw.astart_ttl_sweeper(sweep_interval_minutes=0.001)
        assert await store.raw.astart_ttl_sweeper() is task  # one sweeper at a time
    else:
        future = store.raw.start_ttl_sweeper(sweep_interval_minutes=0.001)
        assert store.raw.start_ttl_sweeper() is future
    for _ in range(600):  # the sweeper runs every 60 ms; wait for it, at most a minute
        if await store.get(NAMESPACE, "brief") is None:
            break
        await asyncio.sleep(0.1)
    assert await store.get(NAMESPACE, "brief") is None
    if store.is_async:
        assert await store.raw.astop_ttl_sweeper(timeout=10) and task.done()
    else:
        assert store.raw.stop_ttl_sweeper(timeout=10) and future.done()


async def test_store_without_ttl_config_starts_no_sweeper(memory: Either) -> None:
    store = store_on(memory)
    if store.is_async:
        task = await store.raw.astart_ttl_sweeper()
        await task
        assert await store.raw.astop_ttl_sweeper()
    else:
        assert store.raw.start_ttl_sweeper().done() and store.raw.stop_ttl_sweeper()


async def test_a_sweep_of_more_expired_items_than_the_lock_table_holds(memory: Either, scope: ScopeArgs) -> None:
    """A sweep locks every expired item of a scope before deleting them: hashed into a bounded number
    of locks per scope (`items.statements.lock_items`), not one each, which outgrew PostgreSQL's lock
    table ("out of shared memory")."""
    scope = {**scope, "project": f"sweep-{uuid.uuid4().hex[:8]}"}  # the sweep takes the whole project
    for start in range(0, 20_000, 10_000):
        batch = [
            {"namespace": ["bulk"], "key": f"k{n}", "value": {}, "ttl_minutes": 1.0}
            for n in range(start, start + 10_000)
        ]
        await memory.put_items(batch, **scope)
    assert await memory.sweep_items(project=scope["project"], at=datetime.now(UTC) + timedelta(hours=1)) == 20_000
