"""The signal registry drives every place a signal name appears, and a new signal is one spec.
Pure: no database."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import sql

from memsoda_core import RecallOptions
from memsoda_core.cli import recall as cli_recall
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.models import Signal
from memsoda_core.options import OPTION_NAMES, AnchorOptions, DateOptions, RecentOptions
from memsoda_core.recall import statements
from memsoda_core.recall.dates import question_window
from memsoda_core.recall.fragments import fragment
from memsoda_core.recall.hits import COMMON_COLUMNS, DETAIL_TYPES, FACT_NAMES, HitRow, _maker
from memsoda_core.recall.planning import PLANNED_AFRESH
from memsoda_core.recall.plans import QUERY_SIGNALS
from memsoda_core.recall.result import explain, fuse_hits, plan_for, statement_params
from memsoda_core.recall.signals import (
    REGISTRY,
    SIGNAL_NAMES,
    RecallPlan,
    RecallRequest,
    SignalOptions,
    SignalSpec,
    planned_signals,
    signal_order,
    statement_groups,
)
from memsoda_core.recall.signals.entities import NAMED_ENTITIES
from memsoda_core.runner.steps import Statement
from memsoda_core.validation import Scope

AT = datetime(2023, 6, 1, tzinfo=UTC)
DATED = "what did I do on 7 May 2023?"
"""A question naming a window before `AT`."""


def _request(
    query: str | None,
    embedding: bool,
    options: RecallOptions | None = None,
    *,
    conversation: bool = False,
    asked_at: datetime | None = None,
) -> RecallRequest:
    """A request as recall builds it; `conversation`: the conversation's turns were embedded."""
    return RecallRequest(
        scope=Scope(dataset="d", project="p"),
        query=query,
        embedding=(0.0, 1.0) if embedding else None,
        options=options or RecallOptions(),
        at=AT,
        asked_at=asked_at,
        conversation=(("user", "the trip to kyoto"),),
        vectors={"conversation": (1.0, 0.0)} if conversation else {},
    )


def _plan(query: str | None, embedding: bool, options: RecallOptions | None = None, **kw: Any) -> RecallPlan:
    return plan_for(_request(query, embedding, options, **kw))


REQUESTS = [
    _request(query, embedding, RecallOptions(anchor=AnchorOptions(hops=hops)))
    for query in ("q", None)
    for embedding in (True, False)
    for hops in (1, 2)
] + [
    _request(DATED if dated else "q", embedding, conversation=conversation)
    for embedding in (True, False)
    for dated in (True, False)
    for conversation in (True, False)
]
PLANS = [plan_for(request) for request in REQUESTS]


def _text(statement: Statement) -> str:
    return statement.as_string(None)


def test_a_hit_names_a_signal_of_the_registry() -> None:
    # `models.Signal` is a str: a new signal needs no edit there, and results are built through the registry
    assert Signal is str
    assert SIGNAL_NAMES == ("vector", "anchor", "keyword", "date", "conversation", "recent")
    with pytest.raises(KeyError, match="temporal"):
        explain(HitRow("temporal", 1, 1, 10))


def test_a_signal_is_registered_by_its_options_line_and_its_knobs_are_recall_options() -> None:
    # one line of SignalOptions is a signal's place in the registry and its typed group of knobs
    registered = [f for f in dataclasses.fields(SignalOptions) if "signal" in f.metadata]
    assert tuple(f.metadata["signal"] for f in registered) == REGISTRY
    assert [f.name for f in registered] == [spec.name for spec in REGISTRY]  # each group named after its signal
    assert {f.name for f in dataclasses.fields(SignalOptions)} <= {f.name for f in dataclasses.fields(RecallOptions)}
    assert issubclass(RecallOptions, SignalOptions)


def test_the_cli_and_the_demo_read_the_registry() -> None:
    from memsoda_core import demo

    assert cli_recall.SIGNALS == SIGNAL_NAMES
    # the demo imports the registry's tuple (it does not re-export it: hence vars())
    assert vars(demo)["QUERY_SIGNALS"] is QUERY_SIGNALS == ("vector", "anchor", "keyword")


def test_planned_signals_are_those_whose_spec_runs_in_registry_order() -> None:
    for request in REQUESTS:
        assert planned_signals(plan_for(request)) == tuple(spec.name for spec in REGISTRY if spec.runs(request))
    options = RecallOptions()
    assert planned_signals(_plan("q", True, options)) == ("vector", "anchor", "keyword")
    assert planned_signals(_plan("q", False, options)) == ("anchor", "keyword", "recent")
    assert planned_signals(_plan(None, True, options)) == ("vector", "anchor")
    assert planned_signals(_plan(None, False, options)) == ("recent",)
    assert planned_signals(_plan(DATED, True, options, conversation=True)) == (
        "vector",
        "anchor",
        "keyword",
        "date",
        "conversation",
    )
    off = RecallOptions(date=DateOptions(candidates=0))
    assert planned_signals(_plan(DATED, True, off)) == ("vector", "anchor", "keyword")
    recent = RecallOptions(recent=RecentOptions(candidates=20))  # the recency list beside a query, opt-in
    assert planned_signals(_plan("q", True, recent)) == ("vector", "anchor", "keyword", "recent")
    assert planned_signals(_plan(None, True, recent)) == ("vector", "anchor")
    assert planned_signals(_plan(None, True, options, conversation=True)) == ("vector", "anchor", "conversation")


def test_the_date_signal_reads_the_window_the_question_names_when_it_is_asked() -> None:
    """`recall.asof` moves the read time to the window's end; the words stay resolved against the
    time the question is asked ("last week" of a question asked on 1 June)."""
    asked = _request("what happened last week?", True)
    moved = dataclasses.replace(asked, at=datetime(2023, 5, 28, tzinfo=UTC), asked_at=AT)
    window = question_window("what happened last week?", AT)
    assert window is not None
    for request in (asked, moved):
        params = statement_params(request)
        assert (params["window_start"], params["window_end"]) == (window.start, window.end)
        assert "date" in plan_for(request).signals
    assert statement_params(moved)["at"] == datetime(2023, 5, 28, tzinfo=UTC)


def test_statement_groups_come_from_each_specs_statement_number() -> None:
    assert (
        statements.STATEMENT_GROUPS
        == statement_groups()
        == (
            ("vector", "keyword", "recent"),
            ("anchor",),
            ("date", "conversation"),
        )
    )
    for plan in PLANS:
        texts = [_text(s) for s in statements.recall_statements("memsoda", plan)]
        planned = planned_signals(plan)
        expected = [[n for n in group if n in planned] for group in statement_groups()]
        expected = [group for group in expected if group]
        assert len(texts) == len(expected)
        for text, group in zip(texts, expected, strict=True):
            assert [n for n in SIGNAL_NAMES if f"SELECT '{n}'" in text] == group  # its signals' hit rows
            assert all(f"{n}_hits AS (" in text for n in group)


def test_hit_rows_name_exactly_the_columns_of_their_statements_signals() -> None:
    plan = RecallPlan(query=True, embedding=True)
    for names in [("vector", "keyword", "recent"), ("anchor",), ("recent",), ("keyword", "recent")]:
        text = _text(statements.hits_statement("memsoda", plan, names))
        hits = text[text.index(f" SELECT '{names[0]}' AS signal") :]
        first = hits.split(" UNION ALL ")[0]
        details = [c for spec in REGISTRY if spec.name in names for c, _ in spec.details]
        columns = [*COMMON_COLUMNS, *dict.fromkeys(details)]
        named = [part.rsplit(" AS ", 1)[-1].split(" FROM ")[0] for part in first.split(", ")]
        assert named == columns
        assert hits.count(" UNION ALL ") == len(names) - 1


def test_every_detail_column_is_a_hit_row_field_with_one_sql_type() -> None:
    assert HitRow._fields == (*COMMON_COLUMNS, *DETAIL_TYPES, "fact")  # the fact's columns, when read with it
    for spec in REGISTRY:
        assert {column for column, _ in spec.details} <= set(DETAIL_TYPES), spec.name


def test_fusion_orders_and_explains_a_facts_hits_by_the_registry() -> None:
    rows = [
        HitRow("recent", 1, 2, 10),
        HitRow("keyword", 1, 1, 10, matched=["tea"]),
        HitRow("anchor", 1, 3, 10, hop=2, via="kyoto"),
        HitRow("vector", 1, 4, 10, similarity=0.81234),
        HitRow("conversation", 1, 6, 10, similarity=0.5),
        HitRow("date", 1, 5, 10, similarity=0.6, began=True, period='2023-05-07 to 2023-05-08 ("7 May 2023")'),
    ]
    (kept,) = fuse_hits(rows, RecallOptions())
    assert [hit.signal for hit in kept.hits] == list(SIGNAL_NAMES) == list(signal_order())
    assert [hit.reason for hit in kept.hits] == [
        "cosine similarity 0.812 to the query",
        "second hop via 'kyoto'",
        "matched terms: tea",
        'began in the window the question names: 2023-05-07 to 2023-05-08 ("7 May 2023");'
        " cosine similarity 0.600 to the query",
        "cosine similarity 0.500 to the conversation's recent turns",
        "most recent live fact",
    ]
    assert kept.hits[0].similarity == 0.8123
    for spec, row in zip(REGISTRY, sorted(rows, key=lambda r: signal_order()[r.signal]), strict=True):
        assert explain(row).reason == spec.explain(row)


def test_anchor_explanations_name_how_the_fact_was_reached() -> None:
    named = HitRow("anchor", 1, 1, 0, hop=1, via="maya", via_named=True)
    near = HitRow("anchor", 1, 1, 0, hop=1, via="netflix", via_named=False, via_similarity=0.8)
    assert explain(named).reason == "touches 'maya', named in the query"
    assert explain(near).reason == "touches 'netflix', near the query (similarity 0.800)"


def test_parameters_are_named_like_the_options_they_come_from() -> None:
    options = RecallOptions()
    params = statement_params(
        RecallRequest(
            scope=Scope(dataset="d", project="p"),
            query="tea in kyoto",
            embedding=[0.0, 1.0],
            at=datetime(2026, 1, 1, tzinfo=UTC),
            options=options,
            text_search_config="english",
        )
    )
    # a bound value is named after its option: the dotted name with "_" ("anchor.max_facts" is
    # anchor_max_facts), or the knob's own name where it already says what it is (hub_min_share)
    fields = {name.replace(".", "_") for name in OPTION_NAMES}
    fields |= {name.partition(".")[2] for name in OPTION_NAMES if "_" in name.partition(".")[2]}
    derived = {"dataset", "project", "at", "qvec", "spans", "span_terms", "terms", "tsconfig"}
    derived |= {
        "keyword_pool",
        "half_max_lexemes",
        "recent_limit",
        "near_gap",
        "near_pool",
    }  # computed, not one option each
    derived |= {"window_start", "window_end", "window_words"}  # the date signal's, from the query
    assert set(params) - derived <= fields
    assert params["anchor_vector_top_k"] == options.anchor.vector_top_k
    taken = {name for plan in PLANS for s in statements.recall_statements("memsoda", plan) for name in s.names}
    taken |= {name for plan in PLANS for name in statements.kept_hits_statement("memsoda", plan).names}
    assert not taken & {"near_k", "near_min", "vector_limit", "anchor_limit", "keyword_limit", "common_share"}
    used = set(params) & taken
    assert used == set(params) - {"episodes_k"}  # every value a statement takes, and only those


def test_hit_rows_decode_by_name_whatever_the_column_order() -> None:
    make = _maker(("fact_id", "signal", "valid_at_us", "rank", "matched"))
    assert make((7, "keyword", 5, 2, ["a"])) == HitRow("keyword", 7, 2, 5, matched=["a"])
    values = ("vector", 7, 1, 5.0, None, None, None, None, 0.9, None, None, None)
    assert _maker(HitRow._fields[:-1])(values) == HitRow(*values)  # every hit column, in order
    fact = tuple(range(len(FACT_NAMES)))
    with_fact = _maker(("signal", "fact_id", "rank", "valid_at_us", *FACT_NAMES))
    assert with_fact(("vector", 7, 1, 5.0, *fact)) == HitRow("vector", 7, 1, 5.0, fact=fact)
    assert with_fact(("vector", 7, 1, 5.0, *(None,) * len(fact))).fact is None  # its columns were not read
    with pytest.raises(ValueError, match="unknown_column"):
        _maker(("signal", "fact_id", "rank", "valid_at_us", "unknown_column"))
    with pytest.raises(ValueError, match="not the columns"):
        _maker(("signal", "fact_id", "valid_at_us"))  # no rank


# --- a fifth signal: one spec in a copy of the registry ----------------------------------------------


def _temporal_ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (
        fragment(
            """
    temporal_hits AS (
        SELECT f.id AS fact_id, f.valid_at, row_number() OVER (ORDER BY f.valid_at, f.id) AS rank
        FROM {s}.facts f WHERE {where_f} LIMIT %(temporal_candidates)s)""",
            schema,
        ),
    )


def _temporal_params(inputs: RecallRequest) -> Mapping[str, Any]:
    return {"temporal_candidates": 7}


TEMPORAL = SignalSpec(
    name="temporal",
    statement=3,
    runs=lambda request: request.query is not None,
    ctes=_temporal_ctes,
    details=(("hop", "1"),),
    params=_temporal_params,
    explain=lambda hit: "in the query's time span",
    requires=(NAMED_ENTITIES,),
)

WITH_TEMPORAL = (*REGISTRY, TEMPORAL)


def test_a_fifth_signal_is_planned_assembled_fused_and_explained_from_its_spec_alone() -> None:
    plan = plan_for(_request("q", True), WITH_TEMPORAL)
    assert planned_signals(plan, WITH_TEMPORAL) == ("vector", "anchor", "keyword", "temporal")
    assert statement_groups(WITH_TEMPORAL)[-1] == ("temporal",)
    texts = [_text(s) for s in statements.recall_statements("memsoda", plan, SHARED, WITH_TEMPORAL)]
    assert len(texts) == 3
    assert "temporal_hits AS (" in texts[2] and "hub_floor AS (" in texts[2]  # with what it requires
    assert "SELECT 'temporal' AS signal, fact_id, rank," in texts[2] and "1 AS hop FROM temporal_hits" in texts[2]
    assert texts[:2] == [_text(s) for s in statements.recall_statements("memsoda", plan)]  # the others unchanged
    params = statement_params(
        RecallRequest(
            scope=Scope(dataset="d", project="p"),
            query="q",
            embedding=None,
            at=datetime(2026, 1, 1, tzinfo=UTC),
            options=RecallOptions(),
            text_search_config="english",
        ),
        WITH_TEMPORAL,
    )
    assert params["temporal_candidates"] == 7
    rows = [HitRow("keyword", 1, 1, 10, matched=["x"]), HitRow("temporal", 1, 1, 10, hop=1)]
    (kept,) = fuse_hits(rows, RecallOptions(), WITH_TEMPORAL)
    assert [(hit.signal, hit.reason) for hit in kept.hits] == [
        ("keyword", "matched terms: x"),
        ("temporal", "in the query's time span"),
    ]
    assert signal_order(WITH_TEMPORAL)["temporal"] == 6


def test_a_small_scopes_statement_plans_each_cte_read_once_apart() -> None:
    """In `kept_hits_statement` (planned at every call on a Citus worker) a CTE read once is
    MATERIALIZED (`signals.live.once`): inlined, it would be planned as part of a larger query,
    which costs more (bench/RESULTS.md, "Planning a small scope's statement")."""
    for plan in (plan for plan in PLANS if not PLANNED_AFRESH & plan.signals):  # those run in one statement
        text = statements.kept_hits_statement("memsoda", plan).as_string()
        for match in re.finditer(r"(?:WITH|,)\s+(\w+) AS (MATERIALIZED )?\(", text):
            name, materialized = match[1], match[2]
            reads = len(re.findall(rf"\b(?:FROM|JOIN) {name}\b", text))
            assert reads >= 2 or materialized, (name, plan)
