"""Recall driven with scripted replies (no database, no model): its plan, its degradation, how it
chooses and plans statements, and fusion of the lists it gets back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memsoda_core.errors import EmbeddingError
from memsoda_core.options import DEFAULT_OPTIONS, FIRST_PERSON_OPTIONS
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.operation import recall
from memsoda_core.recall.planning import ScopeSizes
from memsoda_core.recall.scope_stats import ScopeStatsCache, sample_statement
from memsoda_core.recall.statements import facts_statement
from memsoda_core.runner.compiled import Compiled
from memsoda_core.runner.steps import Concurrently, EmbedQuery, Execute, Planning, Statement
from memsoda_core.scope_growth import LatestFact
from memsoda_core.store.fact_columns import FACT_COLUMNS
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.tenant_index import scope_facts_statement
from memsoda_core.validation import Scope
from tests.scripted import Script, drive, params_of

INFO = StoreInfo(schema="memsoda", model="scripted", dimensions=4, text_search_config="english")
SCOPE = Scope(dataset="acme", project="assistant")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def recall_of(query: str | None, sizes: ScopeSizes | None = None, **kwargs: Any) -> Any:
    return recall(
        INFO,
        SCOPE,
        query,
        options=kwargs.pop("options", DEFAULT_OPTIONS),
        scope_stats=kwargs.pop("scope_stats", None),
        include=frozenset(),
        query_embedding=kwargs.pop("query_embedding", None),
        as_of=None,
        now=NOW,
        scope_sizes=sizes if sizes is not None else ScopeSizes(),
        within=kwargs.pop("within", None),
    )


def store(
    scope_facts: int, hits: list[list[HitRow]] | None = None, facts: list[dict[str, Any]] | None = None
) -> Script:
    script = Script(dimensions=INFO.dimensions).on(scope_facts_statement(INFO.schema), [(scope_facts,)])
    script.on(facts_statement(INFO.schema), [fact_row(**fact) for fact in facts or []])
    latest = [LatestFact(id=n, subject_id=n, lexemes=0, times_seen=1) for n in range(1, scope_facts + 1)]
    script.on(sample_statement(INFO.schema), latest)
    if hits is not None:
        lists = iter(hits)
        original = script.__call__

        def answer(request: Any) -> Any:
            if isinstance(request, Concurrently) and len(request.statements) == 1:  # every signal in one
                return [[row for rows in hits for row in rows]]
            if isinstance(request, Concurrently):
                return [next(lists, []) for _ in request.statements]
            return original(request)

        return answer  # type: ignore[return-value]
    return script


def fact_row(**fields: Any) -> tuple[Any, ...]:
    defaults: dict[str, Any] = {
        "dataset": SCOPE.dataset,
        "project": SCOPE.project,
        "subject": "user",
        "predicate": "likes",
        "object_type": "LITERAL",
        "anchor": "user",
        "anchor_type": "PERSON",
        "mentions": [],
        "valid_at": NOW,
        "invalid_at": None,
        "confidence": 1.0,
        "source_quote": None,
        "created_at": NOW,
        "superseded_by": None,
        "times_seen": 1,
        "expired_at": None,
    }
    values = {**defaults, **fields}
    return tuple(values[column.name] for column in FACT_COLUMNS)


def text(statement: Statement) -> str:
    return statement.as_string(None)


def signal_statements(requests: list[Any]) -> list[Execute]:
    return [statement for r in requests if isinstance(r, Concurrently) for statement in r.statements]


def test_an_embedder_failure_degrades_to_keyword_named_anchors_and_recency() -> None:
    script = store(10)
    script.embed_error = EmbeddingError("the embedder timed out")
    conversation = drive(recall_of("where does the user live?"), script)
    assert conversation.result.degraded
    assert "embedding failed" in (conversation.result.degraded_reason or "")
    sent = " ".join(text(s.statement) for s in signal_statements(conversation.requests))
    assert "recent_hits" in sent and "keyword_hits" in sent and "anchor_hits" in sent
    assert "vector_hits" not in sent and "qvec" not in sent


def test_a_given_embedding_is_not_embedded_again() -> None:
    conversation = drive(recall_of("where?", query_embedding=[0.5] * INFO.dimensions), store(10))
    assert not any(isinstance(r, EmbedQuery) for r in conversation.requests)
    assert not conversation.result.degraded


def test_no_query_recalls_the_most_recent_facts_without_embedding() -> None:
    conversation = drive(recall_of(None), store(10))
    assert not any(isinstance(r, EmbedQuery) for r in conversation.requests)
    sent = " ".join(text(s.statement) for s in signal_statements(conversation.requests))
    assert "recent_hits" in sent and "vector_hits" not in sent


def test_a_small_scope_shares_kept_plans_and_a_large_one_has_its_own_generic_ones() -> None:
    small = signal_statements(drive(recall_of("tesla"), store(10)).requests)
    large = signal_statements(drive(recall_of("tesla"), store(INFO.tenant_index_min_facts)).requests)
    assert len(small) == 1 and len(large) == 2  # a small scope: one statement; a large one: two, run at once
    assert "kept AS" in text(small[0].statement) and not any("kept AS" in text(s.statement) for s in large)
    assert {s.planning for s in small} == {Planning.CACHED}
    assert {s.planning for s in large} == {Planning.GENERIC}
    assert not any("'acme'" in text(s.statement) for s in small)  # every value bound
    assert any("'acme'" in text(s.statement) for s in large)  # named where its partial indexes must match


def test_a_question_naming_a_date_keeps_the_statements_at_once_on_a_small_scope() -> None:
    dated = signal_statements(drive(recall_of("what did the user buy last week?"), store(10)).requests)
    assert len(dated) > 1  # the date signal is planned afresh: in one statement, all of it would be
    assert [s.planning for s in dated if "date_hits" in text(s.statement)] == [Planning.FRESH]
    assert not any("kept AS" in text(s.statement) for s in dated)


def test_a_recall_within_given_facts_restricts_every_statement_to_them_and_others_are_untouched() -> None:
    for query in ("tesla", "what did the user buy last week?"):  # one statement or several (the date's)
        for facts in (10, INFO.tenant_index_min_facts):  # the shared statements, or the scope's own
            plain = signal_statements(drive(recall_of(query), store(facts)).requests)
            within = signal_statements(drive(recall_of(query, within=[4, 9]), store(facts)).requests)
            assert not any("within" in names(s) or "within" in params_of(s) for s in plain)
            assert all("within" in names(s) and params_of(s)["within"] == [4, 9] for s in within)
            assert "live AS MATERIALIZED" in " ".join(text(s.statement) for s in within)  # searched exactly


def names(execute: Execute) -> tuple[str, ...]:
    assert isinstance(execute.statement, Compiled)
    return execute.statement.names


def test_the_scope_size_is_remembered_between_recalls() -> None:
    sizes = ScopeSizes()
    first = drive(recall_of("tesla", sizes), store(10))
    second = drive(recall_of("tesla", sizes), store(10))
    counted = [c.index(Execute, scope_facts_statement(INFO.schema)) for c in (first, second)]
    assert counted[0] >= 0 and counted[1] == -1


def hit(signal: str, fact_id: int, rank: int, **details: Any) -> HitRow:
    return HitRow(signal=signal, fact_id=fact_id, rank=rank, valid_at_us=rank, **details)


def test_fusion_ranks_a_fact_two_signals_found_above_one_found_by_one() -> None:
    hits = [
        [
            hit("vector", 1, 1, similarity=0.9),
            hit("vector", 2, 2, similarity=0.8),
            hit("keyword", 2, 1, matched=["tesla"]),
        ],
        [hit("anchor", 3, 1, hop=1, via="user", via_named=True, similarity=0.5)],
    ]
    facts = [
        {"id": 1, "object": "amsterdam"},
        {"id": 2, "object": "tesla", "predicate": "drives"},
        {"id": 3, "object": "jazz"},
    ]
    conversation = drive(recall_of("tesla", query_embedding=[0.5] * INFO.dimensions), store(10, hits, facts))
    result = conversation.result
    assert [f.fact.id for f in result.facts][:1] == [2]
    assert set(result.facts[0].ranks) == {"vector", "keyword"}
    assert {f.fact.id for f in result.facts} == {1, 2, 3}
    read = [r for r in conversation.requests if isinstance(r, Execute) and r.statement == facts_statement(INFO.schema)]
    assert len(read) == 1 and read[0].planning is Planning.CACHED  # the kept facts, read once after fusion
    assert "tesla" in result.context


def test_a_small_scope_reads_after_fusion_only_the_kept_facts_its_statement_did_not_read() -> None:
    with_columns = [
        hit("vector", 1, 1, similarity=0.9)._replace(fact=fact_row(id=1, object="amsterdam")),
        hit("vector", 2, 2, similarity=0.8)._replace(fact=fact_row(id=2, object="tesla")),
    ]
    conversation = drive(
        recall_of("x", query_embedding=[0.5] * INFO.dimensions), store(10, [with_columns], [{"id": 3, "object": "x"}])
    )
    assert [f.fact.object for f in conversation.result.facts] == ["amsterdam", "tesla"]
    assert conversation.index(Execute, facts_statement(INFO.schema)) == -1  # nothing left to read
    one_unread = [with_columns[0], hit("keyword", 3, 1, matched=["x"])]
    conversation = drive(
        recall_of("x", query_embedding=[0.5] * INFO.dimensions), store(10, [one_unread], [{"id": 3, "object": "x"}])
    )
    read = [r for r in conversation.requests if isinstance(r, Execute) and r.statement == facts_statement(INFO.schema)]
    assert len(read) == 1 and read[0].params["fact_ids"] == [3]  # type: ignore[call-overload,index]
    assert {f.fact.object for f in conversation.result.facts} == {"amsterdam", "x"}


def test_a_kept_fact_takes_its_columns_from_whichever_of_its_rows_carries_them() -> None:
    # kept_hits_statement sends a kept fact's columns on one row only (its first signal by name):
    # here its first row, the vector hit, has none and a later one, the keyword hit, has them all
    rows = [
        hit("vector", 1, 1, similarity=0.9),
        hit("keyword", 1, 1, matched=["tesla"])._replace(fact=fact_row(id=1, object="tesla", predicate="drives")),
    ]
    conversation = drive(recall_of("tesla", query_embedding=[0.5] * INFO.dimensions), store(10, [rows]))
    [scored] = conversation.result.facts
    assert (scored.fact.id, scored.fact.predicate, scored.fact.object) == (1, "drives", "tesla")
    assert set(scored.ranks) == {"vector", "keyword"}
    assert conversation.index(Execute, facts_statement(INFO.schema)) == -1  # whole from the hits: no read after


def test_a_fact_deleted_between_the_two_reads_is_left_out() -> None:
    hits = [[hit("vector", 1, 1, similarity=0.9), hit("vector", 2, 2, similarity=0.8)], []]
    conversation = drive(
        recall_of("x", query_embedding=[0.5] * INFO.dimensions), store(10, hits, [{"id": 2, "object": "tesla"}])
    )
    assert [f.fact.id for f in conversation.result.facts] == [2]


def stats_reads(requests: list[Any]) -> int:
    wanted = text(sample_statement(INFO.schema))
    return sum(1 for r in requests if isinstance(r, Execute) and text(r.statement) == wanted)


def test_the_scope_statistics_are_read_once_and_only_for_options_left_to_the_memory() -> None:
    cache = ScopeStatsCache()
    first = drive(recall_of("tesla", scope_stats=cache), store(10))
    assert stats_reads(first.requests) == 1 and first.result.fusion.stats.sampled == 10
    again = drive(recall_of("tesla", scope_stats=cache), store(10))
    assert stats_reads(again.requests) == 0 and again.result.fusion == first.result.fusion  # remembered
    fixed = drive(recall_of("tesla", options=FIRST_PERSON_OPTIONS), store(10))
    assert stats_reads(fixed.requests) == 0 and fixed.result.fusion is None  # the caller set them all
    latest = drive(recall_of(None), store(10))
    assert stats_reads(latest.requests) == 0 and latest.result.fusion.stats is None  # no query: nothing to choose
