"""`MemsodaStore` against the real embedded PostgreSQL and the offline embedder: LangGraph's store
API (put, get, search, delete, list_namespaces, batch and abatch) checked op by op against
LangGraph's own `InMemoryStore` (LangGraph ships no conformance suite for stores), the facts behind
items, filters, isolation, search by meaning, langmem's memory tools and agents built with
`store=`. Each test runs with a `Memory` (sync API) and an `AsyncMemory` (async API)."""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import InputAgentState
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore
from langmem import create_manage_memory_tool, create_search_memory_tool
from langmem.errors import ConfigurationError as LangmemConfigurationError

from memsoda_core import (
    ArgumentTypeError,
    AsyncMemory,
    ConfigurationError,
    Fact,
    InvalidTextError,
    LimitError,
    LocalEmbedder,
    Memory,
    ScopeArgs,
    ScopeError,
    TextTooLongError,
    ValidationError,
)
from memsoda_core.items.values import MAX_NAMESPACE_LABELS
from memsoda_core.limits import MAX_QUERY_CHARS
from memsoda_langgraph import MemsodaStore
from tests.conftest import Either


class Store:
    """Calls a MemsodaStore through its sync or its async API the same way: `await s.put(...)`."""

    def __init__(self, store: MemsodaStore, *, is_async: bool) -> None:
        self.raw = store
        self.is_async = is_async

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.is_async:
                return await getattr(self.raw, "a" + name)(*args, **kwargs)
            return getattr(self.raw, name)(*args, **kwargs)

        return call


@pytest.fixture(params=["sync", "async"])
async def memory(request: pytest.FixtureRequest, pg_dsn: str, embedder: LocalEmbedder) -> AsyncIterator[Any]:
    if request.param == "sync":
        with Memory.open(pg_dsn, embedder) as opened:
            yield opened
    else:
        async with await AsyncMemory.open(pg_dsn, embedder) as opened_async:
            yield opened_async


@pytest.fixture
def store(memory: Memory | AsyncMemory) -> Store:
    """A store on its own project, so the default scopes ("memories.u1", ...) are this test's."""
    wrapped = MemsodaStore(memory, project=f"lg-{uuid.uuid4().hex[:10]}")
    return Store(wrapped, is_async=isinstance(memory, AsyncMemory))


def shape(items: Sequence[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return [(item.namespace, item.key, item.value) for item in items]


async def test_put_get_update_delete_round_trip(store: Store) -> None:
    namespace = ("memories", "u1", "profile")
    assert await store.get(namespace, "tz") is None
    await store.put(namespace, "tz", {"content": "lives in Lisbon", "zone": "WET"})
    first = await store.get(namespace, "tz")
    assert (first.namespace, first.key, first.value) == (namespace, "tz", {"content": "lives in Lisbon", "zone": "WET"})
    await store.put(namespace, "tz", {"content": "moved to Tokyo", "zone": "JST"})
    second = await store.get(namespace, "tz")
    assert second.value == {"content": "moved to Tokyo", "zone": "JST"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    await store.delete(namespace, "tz")
    assert await store.get(namespace, "tz") is None
    assert await store.search(namespace) == []


async def facts_of(memory: Memory | AsyncMemory, scope: ScopeArgs, **options: Any) -> list[Fact]:
    """`list_facts` of a store's scope (`MemsodaStore.scope`), through either flavour."""
    dataset, project = scope["dataset"], scope["project"]
    if isinstance(memory, AsyncMemory):
        return list((await memory.list_facts(dataset=dataset, project=project, **options)).facts)
    return list(memory.list_facts(dataset=dataset, project=project, **options).facts)


async def test_each_item_has_one_live_fact_and_updates_supersede_it(store: Store, memory: Memory | AsyncMemory) -> None:
    """The fact behind an item follows it: replaced by the new text's fact (history keeps the old
    one, superseded), ended when the item is deleted; equal texts share one fact."""
    namespace = ("memories", "u1")
    scope = store.raw.scope(namespace)

    async def facts() -> list[Fact]:
        return await facts_of(memory, scope, status="all")

    await store.put(namespace, "a", {"content": "likes green tea"})
    await store.put(namespace, "b", {"content": "likes green tea"})
    (shared,) = await facts()
    assert (shared.subject, shared.predicate, shared.object) == ("user", "noted", "likes green tea")
    await store.put(namespace, "a", {"content": "likes black coffee"})
    assert {f.object: f.invalid_at is None for f in await facts()} == {
        "likes green tea": True,
        "likes black coffee": True,
    }
    await store.put(namespace, "b", {"content": "likes oolong"})
    by_text = {f.object: f for f in await facts()}
    assert by_text["likes green tea"].invalid_at is not None  # no item refers to it any more
    assert by_text["likes green tea"].superseded_by == by_text["likes oolong"].id
    await store.delete(namespace, "a")
    by_text = {f.object: f for f in await facts()}
    assert by_text["likes black coffee"].invalid_at is not None and by_text["likes black coffee"].superseded_by is None
    assert [f.object for f in by_text.values() if f.invalid_at is None] == ["likes oolong"]


async def test_a_fact_the_application_wrote_outlives_the_items_that_shared_it(
    store: Store, memory: Memory | AsyncMemory
) -> None:
    """An item whose text equals a live fact refers to it; only a fact an item's put created ends
    when no item refers to it any more. A fact the application wrote, before the item or since,
    stays live and recall finds it."""
    namespace = ("memories", "u1")
    scope = store.raw.scope(namespace)
    core = Either(memory)

    def noted(text: str) -> dict[str, str]:
        return {"subject": "user", "predicate": "noted", "object": text, "object_type": "LITERAL"}

    (before,) = await core.add_facts([noted("buy milk")], **scope)
    await store.put(namespace, "milk", {"content": "buy milk"})
    assert (await core.get_item(namespace, "milk", **scope)).fact_id == before
    await store.put(namespace, "bread", {"content": "buy bread"})
    made = (await core.get_item(namespace, "bread", **scope)).fact_id
    assert await core.add_facts([noted("buy bread")], **scope) == [made]  # written since by the application
    await store.put(namespace, "eggs", {"content": "buy eggs"})
    eggs = (await core.get_item(namespace, "eggs", **scope)).fact_id
    for key in ("milk", "bread", "eggs"):
        await store.delete(namespace, key)
    assert (await core.get_fact(before, **scope)).invalid_at is None
    assert (await core.get_fact(made, **scope)).invalid_at is None
    assert (await core.get_fact(eggs, **scope)).invalid_at is not None  # the store's own: ended
    recalled = await core.recall("milk", **scope)
    assert before in {s.fact.id for s in recalled.facts}


def test_a_fact_written_while_its_last_item_goes_stays_live(sync_memory: Memory) -> None:
    """`add_facts` of an item's text racing the item's delete: whichever commits first, the text is
    a live fact afterwards, the one `add_facts` returned (the mark is read and cleared under the
    fact's relation lock, which both writes take)."""
    scope = ScopeArgs(dataset="race", project=f"race-{uuid.uuid4().hex[:10]}")
    with ThreadPoolExecutor(2) as pool:
        for n in range(6):
            text = f"buy {n} bottles of milk"
            sync_memory.put_items([{"namespace": ["n"], "key": "k", "value": {}, "text": text}], **scope)
            start = threading.Barrier(2)

            def add(text: str = text, start: threading.Barrier = start) -> list[int]:
                start.wait()
                return sync_memory.add_facts([{"subject": "user", "predicate": "noted", "object": text}], **scope)

            def delete(start: threading.Barrier = start) -> None:
                start.wait()
                sync_memory.put_items([{"namespace": ["n"], "key": "k", "value": None}], **scope)

            added, deleted = pool.submit(add), pool.submit(delete)
            deleted.result()
            (fact_id,) = added.result()
            assert sync_memory.get_fact(fact_id, **scope).invalid_at is None, n


async def test_search_by_meaning_puts_the_right_item_first(store: Store) -> None:
    namespace = ("memories", "u1")
    notes = {
        "pet": "Has a golden retriever called Biscuit",
        "job": "Works as a nurse at the city hospital",
        "food": "Is allergic to peanuts",
        "car": "Drives a red Toyota Corolla",
    }
    for key, text in notes.items():
        await store.put(namespace, key, {"content": text})
    for query, expected in [
        ("what kind of dog do I have?", "pet"),
        ("where do I work?", "job"),
        ("which vehicle do I own?", "car"),
        ("food allergy", "food"),
    ]:
        found = await store.search(namespace, query=query, limit=4)
        assert found[0].key == expected, (query, [(i.key, i.score) for i in found])
        scores = [item.score for item in found]
        assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    top_two = await store.search(namespace, query="where do I work?", limit=2)
    rest = await store.search(namespace, query="where do I work?", limit=2, offset=2)
    everything = await store.search(namespace, query="where do I work?", limit=4)
    assert [i.key for i in top_two + rest] == [i.key for i in everything]


async def test_a_search_by_query_ranks_every_item_its_prefix_and_filter_select(store: Store) -> None:
    """The prefix and the filter select items before anything is ranked, and limit and offset page
    over all of them. Recall keeps at most `MAX_K` (200) facts, here all about coffee: the weather
    notes that the filter or a deeper prefix selects were lost when those applied after its cut,
    and so was every page past it. Items with no text come last, unscored, as in `InMemoryStore`."""
    coffee = [
        PutOp(("mem", "u1", "notes"), f"c{n}", {"content": f"note {n}: I drink coffee every morning", "kind": "common"})
        for n in range(210)
    ]
    weather = [
        PutOp(
            ("mem", "u1", "profile"), f"w{n}", {"content": f"note {n} about the weather and the garden", "kind": "rare"}
        )
        for n in range(5)
    ]
    unindexed = PutOp(("mem", "u1", "notes"), "unindexed", {"content": "a rare note", "kind": "rare"}, index=False)
    await store.batch([*coffee, *weather, unindexed])
    rare = await store.search(("mem", "u1"), query="coffee", filter={"kind": "rare"}, limit=10)
    assert [i.key for i in rare[-1:]] == ["unindexed"] and rare[-1].score is None
    assert sorted(i.key for i in rare[:-1]) == [f"w{n}" for n in range(5)]
    profile = await store.search(("mem", "u1", "profile"), query="coffee", limit=10)
    assert sorted(i.key for i in profile) == [f"w{n}" for n in range(5)]
    assert len(await store.search(("mem", "u1"), query="coffee", limit=10, offset=200)) == 10
    everything = await store.search(("mem", "u1"), query="coffee", limit=300)
    assert len(everything) == 216 and everything[-1].key == "unindexed" and everything[-1].score is None
    assert {i.key for i in everything[-6:-1]} == {f"w{n}" for n in range(5)}  # the least like the query
    scores = [i.score for i in everything[:-1]]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    pages = [await store.search(("mem", "u1"), query="coffee", limit=50, offset=n) for n in range(0, 216, 50)]
    assert [i.key for page in pages for i in page] == [i.key for i in everything]


async def test_index_false_and_index_fields(store: Store) -> None:
    namespace = ("docs", "u1")
    await store.put(namespace, "hidden", {"content": "the launch code is swordfish"}, index=False)
    await store.put(namespace, "titled", {"title": "swordfish recipes", "body": "grilled fish"}, index=["title"])
    found = await store.search(namespace, query="swordfish")  # the unindexed item last, unscored (as InMemoryStore)
    assert [(i.key, i.score is None) for i in found] == [("titled", False), ("hidden", True)]
    assert {i.key for i in await store.search(namespace)} == {"hidden", "titled"}  # no query: every item


async def test_a_values_other_fields_stay_out_of_its_fact(store: Store, memory: Memory | AsyncMemory) -> None:
    """By default an item's fact is its "content" (every string in it when it is an object); a value
    without "content" is found by every string in it. The other fields still filter."""
    namespace = ("memories", "u1")
    await store.put(namespace, "d", {"content": "User's daughter is called Mia", "kind": "note", "tags": ["family"]})
    await store.put(namespace, "p", {"content": {"name": "Ana", "city": "Porto"}, "kind": "profile"})
    await store.put(namespace, "x", {"title": "Trip plan", "body": "Lisbon in May"})
    facts = await facts_of(memory, store.raw.scope(namespace))
    expected = ["Ana; Porto", "Trip plan; Lisbon in May", "User's daughter is called Mia"]
    assert sorted(f.object for f in facts) == expected
    assert [i.key for i in await store.search(namespace, query="daughter Mia", filter={"kind": "note"})] == ["d"]
    assert await store.search(namespace, query="note", filter={"kind": "nothing"}) == []


async def test_filters_run_in_sql_like_langgraphs(store: Store) -> None:
    namespace = ("products", "shop")
    rows = {
        "a": {"name": "apple", "price": 1.5, "tags": ["fruit"], "meta": {"color": "red", "n": 1}},
        "b": {"name": "bread", "price": 3, "tags": ["bakery"], "meta": {"color": "brown", "n": 2}},
        "c": {"name": "cheese", "price": 7.25, "meta": {"color": "yellow", "n": 3}},
    }
    reference = InMemoryStore()
    for key, value in rows.items():
        await store.put(namespace, key, value)
        reference.put(namespace, key, value)
    cases: list[dict[str, Any]] = [
        {"name": "apple"},
        {"price": {"$gt": 1.5}},
        {"price": {"$gte": 1.5, "$lt": 7.25}},
        {"price": {"$lte": 3}},
        {"name": {"$ne": "bread"}},
        {"name": {"$eq": "cheese"}},
        {"meta": {"color": "brown"}},
        {"tags": ["fruit"]},
        {"missing": None},
        {"name": "apple", "price": {"$gt": 2}},
    ]
    for case in cases:
        got = {i.key for i in await store.search(namespace, filter=case)}
        expected = {i.key for i in reference.search(namespace, filter=case)}
        assert got == expected, case
    # InMemoryStore raises comparing "n/a" with a number; memsoda compares values of one JSON type only
    await store.put(("products", "odd"), "d", {"name": "dates", "price": "n/a"})
    assert await store.search(("products", "odd"), filter={"price": {"$gt": 2}}) == []
    assert len(await store.search(("products", "odd"), filter={"price": {"$gt": "m"}})) == 1
    with pytest.raises(ValidationError):
        await store.search(namespace, filter={"price": {"$regex": "x"}})


async def test_order_filters_read_numbers_in_strings_like_inmemorystore(store: Store) -> None:
    """`InMemoryStore` compares `$gt`/`$gte`/`$lt`/`$lte` as `float(value)` against
    `float(operand)`, so "7" >= 5 and 10 >= "4"; memsoda reads a number in a string the same way
    (a decimal number as text: `items.statements.NUMBER_TEXT`). Where `InMemoryStore` raises (a
    string that is no number, a missing field), memsoda compares strings with strings only, and a
    missing field matches nothing. PostgresStore compares every value as text ("10" < "4")."""
    namespace = ("products", "coerced")
    rows: dict[str, dict[str, Any]] = {
        "int": {"v": 5},
        "str": {"v": "7"},
        "spaced": {"v": " 10 "},
        "float": {"v": 2.5},
        "exp": {"v": "-1e1"},
    }
    reference = InMemoryStore()
    for key, value in rows.items():
        await store.put(namespace, key, value)
        reference.put(namespace, key, value)
    cases: list[dict[str, Any]] = [
        {"v": {"$gte": "4"}},
        {"v": {"$gt": 4}},
        {"v": {"$lt": "10"}},
        {"v": {"$lte": " 2.5"}},
        {"v": {"$gte": 5, "$lt": "8"}},
        {"v": {"$gt": "-1e2"}},
        {"v": {"$lt": -9.5}},
    ]
    for case in cases:
        got = {i.key for i in await store.search(namespace, filter=case)}
        assert got == {i.key for i in reference.search(namespace, filter=case)}, case
    assert {i.key for i in await store.search(namespace, filter={"v": {"$gte": "4"}})} == {"int", "str", "spaced"}
    await store.put(namespace, "word", {"v": "abc"})
    await store.put(namespace, "none", {"w": 1})
    reference.put(namespace, "word", {"v": "abc"})
    with pytest.raises(ValueError):  # float("abc")
        reference.search(namespace, filter={"v": {"$gt": 4}})
    assert "word" not in {i.key for i in await store.search(namespace, filter={"v": {"$gt": 4}})}
    assert {i.key for i in await store.search(namespace, filter={"v": {"$gt": "a"}})} == {"word"}  # strings only


async def test_a_nested_mapping_filter_matches_objects_only_like_langgraphs(store: Store) -> None:
    """`{"o": {}}` matches items whose `o` is an object (any object), not every item; a nested
    mapping's fields are tested only where the field is an object, as `InMemoryStore` does."""
    namespace = ("products", "nested")
    rows: dict[str, dict[str, Any]] = {
        "object": {"o": {"p": 1}},
        "empty": {"o": {}},
        "number": {"o": 5},
        "list": {"o": [1]},
        "null": {"o": None},
        "missing": {"x": 1},
    }
    reference = InMemoryStore()
    for key, value in rows.items():
        await store.put(namespace, key, value)
        reference.put(namespace, key, value)
    cases: list[dict[str, Any]] = [{"o": {}}, {"o": {"q": None}}, {"o": {"p": 1}}, {"o": {"p": {}}}]
    for case in cases:
        got = {i.key for i in await store.search(namespace, filter=case)}
        assert got == {i.key for i in reference.search(namespace, filter=case)}, case
    assert {i.key for i in await store.search(namespace, filter={"o": {}})} == {"object", "empty"}


async def test_a_read_only_memory_serves_langgraphs_reads(store: Store, pg_dsn: str, embedder: LocalEmbedder) -> None:
    """LangGraph reads with `refresh_ttl=True` by default; a read-only memory serves them (it never
    refreshes a TTL: that is a write), items with a TTL included."""
    namespace = ("memories", "u1")
    await store.put(namespace, "plain", {"content": "likes green tea"})
    await store.put(namespace, "timed", {"content": "likes black coffee"}, ttl=60)
    scope = store.raw.scope(namespace)
    with Memory.open(pg_dsn, embedder, read_only=True) as opened:

        def expiry() -> Any:
            found = opened.get_item(namespace, "timed", **scope)
            return None if found is None else found.expires_at

        before = expiry()
        reader = MemsodaStore(opened, project=scope["project"])
        for key, text in (("plain", "likes green tea"), ("timed", "likes black coffee")):
            got = reader.get(namespace, key)
            assert got is not None and got.value == {"content": text}
        assert {i.key for i in reader.search(namespace)} == {"plain", "timed"}
        assert reader.search(namespace, query="coffee", limit=1)[0].key == "timed"
        assert before is not None and expiry() == before


async def test_namespaces_are_tenants_and_users_never_meet(store: Store) -> None:
    alice, bob = ("memories", "alice"), ("memories", "bob")
    await store.put(alice, "1", {"content": "Alice's sister is called Maria"})
    await store.put(bob, "1", {"content": "Bob's sister is called Clara"})
    assert store.raw.scope(alice) != store.raw.scope(bob)
    for query in ("sister", "what is Clara's name?", "Bob"):
        assert [i.namespace for i in await store.search(alice, query=query)] == [alice]
        assert [i.namespace for i in await store.search(bob, query=query)] == [bob]
    assert (await store.get(alice, "1")).value["content"].startswith("Alice")
    # a prefix shorter than a scope spans the scopes under it, and says which namespace each item is in
    spanning = await store.search(("memories",), query="Clara")
    assert spanning[0].namespace == bob and {i.namespace for i in spanning} == {alice, bob}
    assert {i.namespace for i in await store.search(("memories",))} == {alice, bob}


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
    ("a", "Z"),
    ("a", "é"),
]


async def test_list_namespaces_matches_inmemorystore(store: Store) -> None:
    reference = InMemoryStore()
    for n, namespace in enumerate(NAMESPACES):
        await store.put(namespace, f"k{n}", {"n": n}, index=False)
        reference.put(namespace, f"k{n}", {"n": n})
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "b")},
        {"prefix": ("a", "*", "f")},
        {"suffix": ("f",)},
        {"suffix": ("*", "f")},
        {"prefix": ("a",), "suffix": ("f",)},
        {"prefix": ("*", "users")},
        {"max_depth": 2},
        {"prefix": ("a",), "max_depth": 3},
        {"limit": 3},
        {"limit": 3, "offset": 2},
        {"prefix": ("nothing",)},
        {"prefix": ("a", "b", "c", "d", "e")},
        {"max_depth": 0},  # every namespace cut to none of its labels: the root, ()
        {"max_depth": 0, "prefix": ("a", "b")},
        {"max_depth": 0, "prefix": ("nothing",)},
        {"max_depth": 0, "offset": 1},
        {"max_depth": 0, "limit": 0},
        {"prefix": DEEP},  # deeper than any namespace a put can store
        {"suffix": ("*", "x" * 300)},  # a label longer than any a put can store
    ]
    for case in cases:
        assert await store.list_namespaces(**case) == reference.list_namespaces(**case), case


DEEP = tuple(f"l{n}" for n in range(MAX_NAMESPACE_LABELS + 8))
"""A namespace deeper than a put can store (`items.values.MAX_NAMESPACE_LABELS`)."""


async def test_reads_of_an_address_no_put_can_store_find_nothing_like_inmemorystore(store: Store) -> None:
    """LangGraph's stores read any address; memsoda stores none outside its limits (the root, more
    than 32 labels, a label over 200 or a key over 1,000 characters, a NUL), so a read of such an
    address finds nothing and a delete of it does nothing, as `InMemoryStore` answers for an address
    that holds nothing. Only a put there raises (`LimitError`, `TextTooLongError`, ...)."""
    reference = InMemoryStore()
    namespace = ("memories", "u1")
    await store.put(namespace, "k", {"content": "kept"})
    reference.put(namespace, "k", {"content": "kept"})
    addresses: list[tuple[tuple[str, ...], str]] = [
        ((), "k"),
        (DEEP, "k"),
        (("memories", "x" * 300), "k"),
        (("memories", "u1", "y" * 300), "k"),
        (namespace, "k" * 5_000),
        (namespace, "k\x00"),
    ]
    for where, key in addresses:
        assert await store.get(where, key) is None and reference.get(where, key) is None, (where[:3], key[:3])
        await store.delete(where, key)
        reference.delete(where, key)
    assert [(i.namespace, i.key) for i in await store.search(namespace)] == [(namespace, "k")]
    for where in (DEEP, ("memories", "x" * 300)):
        assert await store.search(where) == reference.search(where) == []
        assert await store.search(where, query="kept") == []
    ops = [GetOp(DEEP, "k"), GetOp(namespace, "k"), PutOp((), "k", None), SearchOp(DEEP), GetOp((), "k")]
    results = await store.batch(ops)
    assert results[0] is None and results[1].value == {"content": "kept"} and results[2:] == [None, [], None]
    with pytest.raises(LimitError):
        await store.put(DEEP, "k", {"content": "too deep"})
    with pytest.raises(TextTooLongError):
        await store.put(namespace, "k" * 5_000, {"content": "long key"})
    with pytest.raises(InvalidNamespaceError):  # LangGraph's own rule, which its stores share
        await store.put((), "k", {"content": "no namespace"})
    with pytest.raises(ValidationError):  # the other arguments are checked wherever the address is
        await store.search(DEEP, filter={"$x": 1})


async def test_a_negative_limit_offset_or_max_depth_raises_like_postgresstore(store: Store) -> None:
    """`InMemoryStore` slices a Python list, so `offset=-1` gives the last item and `max_depth=-1`
    drops each namespace's last label; LangGraph's PostgresStore passes them to SQL, which refuses
    them. memsoda refuses them too, with a `ValidationError` (a `ValueError`)."""
    namespace = ("memories", "u1")
    await store.put(namespace, "k", {"content": "kept"})
    reference = InMemoryStore()
    reference.put(namespace, "k", {"content": "kept"})
    assert [i.key for i in reference.search(namespace, offset=-1)] == ["k"]  # the accident memsoda does not copy
    for call in (
        store.search(namespace, offset=-1),
        store.search(namespace, query="kept", limit=-1),
        store.list_namespaces(offset=-1),
        store.list_namespaces(limit=-1),
        store.list_namespaces(max_depth=-1),
    ):
        with pytest.raises(ValidationError):
            await call


async def test_values_come_back_as_json_like_postgresstore(store: Store) -> None:
    """A value is stored as JSON (jsonb), as LangGraph's PostgresStore stores it: a tuple comes
    back a list and a number used as a key a string. `InMemoryStore` keeps the Python objects."""
    namespace = ("memories", "u1")
    value = {"pair": (1, "a"), "nested": {"t": ((1, 2), [3])}, "ids": {7: "seven"}}
    await store.put(namespace, "k", value)
    reference = InMemoryStore()
    reference.put(namespace, "k", value)
    expected = {"pair": [1, "a"], "nested": {"t": [[1, 2], [3]]}, "ids": {"7": "seven"}}
    assert (await store.get(namespace, "k")).value == expected
    assert [i.value for i in await store.search(namespace)] == [expected]
    assert reference.get(namespace, "k").value == value  # type: ignore[union-attr]
    assert [i.key for i in await store.search(namespace, filter={"pair": [1, "a"]})] == ["k"]
    assert [i.key for i in await store.search(namespace, filter={"pair": (1, "a")})] == ["k"]


async def test_batch_applies_ops_in_order(store: Store) -> None:
    namespace = ("memories", "u1")
    ops = [
        PutOp(namespace, "x", {"content": "first"}),
        PutOp(namespace, "x", {"content": "second"}),
        PutOp(("memories", "u2"), "y", {"content": "other user"}),
        GetOp(namespace, "x"),
        SearchOp(namespace, query="second"),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("memories",)),)),
        PutOp(namespace, "x", None),
        GetOp(namespace, "x"),
        GetOp(("memories", "u2"), "y"),
    ]
    results = await store.batch(ops)
    assert results[:3] == [None, None, None]
    assert results[3].value == {"content": "second"}
    assert shape(results[4]) == [(namespace, "x", {"content": "second"})]
    assert results[5] == [("memories", "u1"), ("memories", "u2")]
    assert results[6:8] == [None, None]
    assert results[8].value == {"content": "other user"}


async def test_bad_input_raises_and_writes_nothing(store: Store) -> None:
    namespace = ("memories", "u1")
    with pytest.raises(ValidationError):
        await store.put(namespace, "nan", {"score": math.nan})
    with pytest.raises(ValidationError):
        await store.batch([PutOp(namespace, "ok", {"content": "fine"}), PutOp(namespace, "bad", {"x": {1, 2}})])
    assert await store.search(namespace) == []
    with pytest.raises(InvalidNamespaceError):
        await store.batch([PutOp(("memories", "a.b"), "k", {"content": "dotted"})])
    with pytest.raises(ValidationError):  # a TTL must be a positive number of minutes (tests/test_item_ttl.py)
        await store.put(namespace, "k", {"content": "expiring"}, ttl=-5)


@pytest.mark.parametrize("value", ["a string", 5, ["content", "x"]])
async def test_a_value_that_is_not_a_dict_raises_what_langgraph_raises(store: Store, value: Any) -> None:
    namespace = ("memories", "u1")
    with pytest.raises(Exception) as theirs:
        InMemoryStore().put(namespace, "k", value)
    with pytest.raises(type(theirs.value)) as ours:  # ValueError or TypeError: ArgumentTypeError is both
        await store.put(namespace, "k", value)
    assert isinstance(ours.value, ArgumentTypeError) and "dict" in str(ours.value)
    with pytest.raises(ArgumentTypeError):
        await store.batch(
            [PutOp(namespace, "ok", {"content": "fine"}), GetOp(namespace, "ok"), PutOp(namespace, "k", value)]
        )
    assert await store.search(("memories",)) == []


async def test_a_bad_op_anywhere_in_a_batch_writes_nothing(store: Store) -> None:
    alice, bob = ("memories", "alice"), ("memories", "bob")
    bad_batches: list[tuple[type[Exception], list[Any]]] = [
        (InvalidTextError, [PutOp(bob, "k1", {"content": "first bob"}), PutOp(alice, "k3", {"content": "bad\x00"})]),
        (ValidationError, [PutOp(alice, "k1", {"content": "ok"}), GetOp(bob, "k1"), SearchOp(bob, filter={"$x": 1})]),
        (ValidationError, [PutOp(alice, "k1", {"content": "ok"}), SearchOp(bob, query=5)]),  # type: ignore[arg-type]
        (ValidationError, [PutOp(alice, "k1", {"content": "ok"}), SearchOp(DEEP, filter={"$x": 1})]),
        (ValidationError, [PutOp(alice, "k1", {"content": "ok"}), ListNamespacesOp(max_depth=-1)]),
        (ValidationError, [PutOp(alice, "k1", {"content": "ok"}), ListNamespacesOp(max_depth=0, offset=-1)]),
    ]
    for error, ops in bad_batches:
        with pytest.raises(error):
            await store.batch(ops)
    assert await store.search(("memories",)) == []
    assert await store.list_namespaces() == []


async def test_a_query_over_the_limit_searches_by_its_head(store: Store) -> None:
    namespace = ("memories", "u1")
    await store.put(namespace, "car", {"content": "drives a honda civic"})
    await store.put(namespace, "sister", {"content": "sister ana lives in porto"})
    # langmem's memory manager searches by the latest messages; LangGraph's stores take any length
    query = "which car do I drive? " + "and some pasted notes. " * 200
    assert len(query) > MAX_QUERY_CHARS
    found = await store.search(namespace, query=query, limit=1)
    assert [item.key for item in found] == ["car"]


def test_an_async_memory_refuses_the_sync_api(pg_dsn: str, embedder: LocalEmbedder) -> None:
    import asyncio

    async def make() -> AsyncMemory:
        return await AsyncMemory.open(pg_dsn, embedder)

    loop = asyncio.new_event_loop()
    try:
        opened = loop.run_until_complete(make())
        with pytest.raises(ConfigurationError, match="AsyncMemory"):
            MemsodaStore(opened, project="p").get(("memories", "u1"), "k")
        loop.run_until_complete(opened.close())
    finally:
        loop.close()


async def test_langmem_tools_run_on_memsoda(store: Store) -> None:
    """langmem's own tools, unchanged, with a namespace template filled from the config."""
    namespace = ("memories", "{langgraph_user_id}")
    manage = create_manage_memory_tool(namespace=namespace, store=store.raw)
    search = create_search_memory_tool(namespace=namespace, store=store.raw, response_format="content_and_artifact")
    config = {"configurable": {"langgraph_user_id": "u-42"}}
    other = {"configurable": {"langgraph_user_id": "u-43"}}

    async def call(tool: Any, args: dict[str, Any], cfg: dict[str, Any]) -> Any:
        return await tool.ainvoke(args, config=cfg) if store.is_async else tool.invoke(args, config=cfg)

    said = await call(manage, {"content": "User prefers window seats on flights", "action": "create"}, config)
    memory_id = said.split()[-1]
    await call(manage, {"content": "User's daughter is named Ana"}, config)
    await call(manage, {"content": "User is vegetarian"}, other)
    item = await store.get(("memories", "u-42"), memory_id)
    assert item.value == {"content": "User prefers window seats on flights"}
    found = await call(
        search, {"type": "tool_call", "name": "search_memory", "id": "c1", "args": {"query": "seat preference"}}, config
    )
    assert found.artifact[0].key == memory_id and "window seats" in found.content
    assert "vegetarian" not in found.content
    await call(manage, {"content": "User prefers aisle seats", "action": "update", "id": memory_id}, config)
    assert (await store.get(("memories", "u-42"), memory_id)).value == {"content": "User prefers aisle seats"}
    await call(manage, {"action": "delete", "id": memory_id}, config)
    assert await store.get(("memories", "u-42"), memory_id) is None


async def test_langmem_tools_without_the_user_key_raise_and_write_nothing(store: Store) -> None:
    """The user of a run is in the namespace, which langmem fills from the config; a run that does
    not set the key gets langmem's error, and nothing is written."""
    manage = create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store.raw)
    args = {"content": "User is vegetarian", "action": "create"}
    config = {"configurable": {"user_id": "u-1"}}
    with pytest.raises(LangmemConfigurationError, match="langgraph_user_id"):
        if store.is_async:
            await manage.ainvoke(args, config=config)
        else:
            manage.invoke(args, config=config)
    assert await store.search(("memories",)) == []


def test_a_store_needs_a_project(memory: Memory | AsyncMemory) -> None:
    with pytest.raises(TypeError, match="project"):
        MemsodaStore(memory)  # type: ignore[call-arg]
    with pytest.raises(ScopeError, match="project"):
        MemsodaStore(memory, project="")


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, whose scripted replies may call tools; binding tools is a no-op."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


async def test_an_agent_built_with_the_store_learns_in_one_thread_and_recalls_in_the_next(store: Store) -> None:
    namespace = ("memories", "{langgraph_user_id}")
    tools = [create_manage_memory_tool(namespace=namespace), create_search_memory_tool(namespace=namespace)]
    script = [
        AIMessage("", tool_calls=[{"name": "manage_memory", "id": "t1", "args": {"content": "User's cat is Miso"}}]),
        AIMessage("Noted: your cat is Miso."),
        AIMessage("", tool_calls=[{"name": "search_memory", "id": "t2", "args": {"query": "pet's name"}}]),
        AIMessage("Your cat is called Miso."),
    ]
    agent = create_agent(ScriptedChatModel(messages=iter(script)), tools=tools, store=store.raw)
    config: RunnableConfig = {"configurable": {"langgraph_user_id": "u-7"}}

    async def run(text: str) -> list[Any]:
        state: InputAgentState = {"messages": [HumanMessage(text)]}
        done = await agent.ainvoke(state, config) if store.is_async else agent.invoke(state, config)
        return list(done["messages"])

    await run("My cat is called Miso.")
    assert [i.value for i in await store.search(("memories", "u-7"))] == [{"content": "User's cat is Miso"}]
    replies = await run("What's my pet's name?")
    (tool_message,) = [m for m in replies if isinstance(m, ToolMessage)]
    assert "Miso" in str(tool_message.content)
    assert replies[-1].content == "Your cat is called Miso."


async def test_a_graph_node_writes_through_get_store_and_a_later_run_reads(store: Store) -> None:
    def remember(state: MessagesState) -> dict[str, Any]:
        get_store().put(("notes", "u1"), "last", {"content": str(state["messages"][-1].content)})
        return {}

    async def aremember(state: MessagesState) -> dict[str, Any]:
        await get_store().aput(("notes", "u1"), "last", {"content": str(state["messages"][-1].content)})
        return {}

    def read(state: MessagesState) -> dict[str, Any]:
        found = get_store().search(("notes", "u1"), query="favourite city")
        return {"messages": [AIMessage(found[0].value["content"] if found else "nothing")]}

    async def aread(state: MessagesState) -> dict[str, Any]:
        found = await get_store().asearch(("notes", "u1"), query="favourite city")
        return {"messages": [AIMessage(found[0].value["content"] if found else "nothing")]}

    def graph(name: str, node: Any) -> Any:
        builder = StateGraph(MessagesState)
        builder.add_node(name, node)
        builder.add_edge(START, name)
        return builder.compile(store=store.raw)

    writer = graph("remember", aremember if store.is_async else remember)
    reader = graph("read", aread if store.is_async else read)
    told = {"messages": [HumanMessage("My favourite city is Porto")]}
    asked = {"messages": [HumanMessage("Which city do I like best?")]}
    if store.is_async:
        await writer.ainvoke(told)
        done = await reader.ainvoke(asked)
    else:
        writer.invoke(told)
        done = reader.invoke(asked)
    assert done["messages"][-1].content == "My favourite city is Porto"
