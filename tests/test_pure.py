"""The pure parts, no database: fusion, rendering, text handling, SQL composition."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import re
import unicodedata
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from memsoda_core import Fact, RecallOptions, ScoredFact, SignalHit
from memsoda_core.errors import ArgumentTypeError, ConfigurationError, LimitError, ValidationError
from memsoda_core.fact_text import day
from memsoda_core.items import calls
from memsoda_core.items.values import Condition, NamespaceMatch
from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.limits import MAX_NAME_CHARS, MAX_NAME_TOKENS, MAX_QUERY_CHARS
from memsoda_core.ops.maintenance import statistics_stale
from memsoda_core.options import ADAPTIVE, DEFAULT_OPTIONS, OPTION_NAMES, AnchorOptions, EntitiesOptions, KeywordOptions
from memsoda_core.recall.fusion import rrf, rrf_ranks
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.plans import FULL_PLAN
from memsoda_core.recall.render import anchor_entities, group_by_anchor, render
from memsoda_core.recall.result import fuse_hits, plan_for
from memsoda_core.recall.signals import SIGNAL_NAMES, RecallPlan, RecallRequest, planned_signals
from memsoda_core.recall.statements import hits_statement, recall_groups, recall_statements
from memsoda_core.text import (
    collapse_line,
    keyword_terms,
    message_query,
    name_spans,
    name_spans_with_terms,
    normalize_name,
    normalize_query,
    normalized_terms,
)
from memsoda_core.validation import Scope


def fact(fid: int, subject: str, predicate: str, obj: str, anchor: str, anchor_type: str, valid: str) -> Fact:
    return Fact(
        id=fid,
        dataset="d",
        project="p",
        subject=subject,
        predicate=predicate,
        object=obj,
        object_type=anchor_type,
        anchor=anchor,
        anchor_type=anchor_type,
        mentions=(),
        valid_at=datetime.fromisoformat(valid).replace(tzinfo=UTC),
        invalid_at=None,
        confidence=1.0,
        source_quote=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def scored(f: Fact, score: float) -> ScoredFact:
    return ScoredFact(fact=f, score=score, hits=(SignalHit(signal="vector", rank=1, reason="test"),))


# --- fusion --------------------------------------------------------------------------------------


def test_rrf_scores_are_sums_of_reciprocal_1_based_ranks() -> None:
    fused = rrf({"vector": [10, 20], "keyword": [20]}, k=60)
    by_id = {f.fact_id: f for f in fused}
    assert by_id[10].score == pytest.approx(1 / 61)
    assert by_id[20].score == pytest.approx(1 / 62 + 1 / 61)
    assert by_id[20].ranks == {"vector": 2, "keyword": 1}


def test_ref_agreement_at_middling_rank_beats_a_single_top_rank() -> None:
    # fact 1 is first in one list only; fact 2 is 20th in two lists
    filler = list(range(100, 119))
    fused = rrf({"vector": [1, *filler, 2], "anchor": [*filler[:19], 2], "keyword": []}, k=60)
    order = [f.fact_id for f in fused]
    assert order.index(2) < order.index(1)


def test_rrf_fuses_by_id_and_breaks_ties_deterministically() -> None:
    first = rrf({"a": [1, 2], "b": [2, 1]}, k=60, tiebreak={1: 5.0, 2: 9.0})
    second = rrf({"b": [2, 1], "a": [1, 2]}, k=60, tiebreak={1: 5.0, 2: 9.0})
    assert [f.fact_id for f in first] == [f.fact_id for f in second] == [2, 1]


@given(
    st.dictionaries(
        st.integers(1, 50),
        st.dictionaries(st.sampled_from(["vector", "anchor", "keyword"]), st.integers(1, 8), min_size=1),
    ),
    st.integers(0, 12),
)
def test_rrf_with_a_limit_is_the_head_of_the_full_order(ranks: dict[int, dict[str, int]], limit: int) -> None:
    tiebreak = {fact_id: float(fact_id % 3) for fact_id in ranks}
    full = rrf_ranks(ranks, k=60, tiebreak=tiebreak)
    assert rrf_ranks(ranks, k=60, tiebreak=tiebreak, limit=limit) == full[:limit]


@given(
    st.dictionaries(
        st.integers(1, 50),
        st.dictionaries(st.sampled_from(["vector", "anchor", "keyword"]), st.integers(1, 60), min_size=1),
    ),
    st.integers(1, 3),
)
def test_rrf_order_is_score_then_best_rank_then_tiebreak_then_id(ranks: dict[int, dict[str, int]], mod: int) -> None:
    tiebreak = {fact_id: float(fact_id % mod) for fact_id in ranks}

    def reference(fact_id: int) -> tuple[float, int, float, int]:
        by_signal = ranks[fact_id].values()
        return (-math.fsum(1 / (60 + r) for r in by_signal), min(by_signal), -tiebreak[fact_id], -fact_id)

    fused = rrf_ranks(ranks, k=60, tiebreak=tiebreak)
    assert [f.fact_id for f in fused] == sorted(ranks, key=reference)
    assert [f.score for f in fused] == [-reference(f.fact_id)[0] for f in fused]


def test_fusion_breaks_a_tie_by_the_more_recent_fact_then_explains_each_hit() -> None:
    rows = [
        HitRow("vector", 7, 1, 1_700_000_000_000_000, similarity=0.9),
        HitRow("keyword", 8, 1, 1_700_000_000_000_001, matched=["civic"]),
        HitRow("keyword", 7, 3, 1_700_000_000_000_000, matched=["honda"]),
        HitRow("anchor", 9, 1, 1_800_000_000_000_000, hop=1, via="user", via_named=True, similarity=0.5),
    ]
    kept = fuse_hits(rows, RecallOptions(facts_in_context=3))
    assert [k.fact_id for k in kept] == [7, 9, 8]  # 7 is in two lists; 9 and 8 tie, 9 is more recent
    assert [h.signal for h in kept[0].hits] == ["vector", "keyword"]
    assert kept[0].hits[1].reason == "matched terms: honda"
    assert kept[1].hits[0].reason == "touches 'user', named in the query"


# --- rendering -----------------------------------------------------------------------------------

REFERENCE_BLOCK = """Known facts about the user, most relevant first.


# FACTS  (format: fact (valid: from – to))
- user is interested in toyota corolla hybrid  (valid: 2026-08-16 – present)
- user finds too big suvs  (valid: 2026-08-16 – present)
- user drives honda civic  (valid: 2026-03-01 – present)


# ENTITIES
- toyota corolla hybrid (PRODUCT)
- suvs (PRODUCT)
- honda civic (PRODUCT)"""


def test_ref_rendering_matches_the_reference_block_exactly() -> None:
    facts = [
        scored(
            fact(
                1, "user", "is interested in", "toyota corolla hybrid", "toyota corolla hybrid", "PRODUCT", "2026-08-16"
            ),
            0.05,
        ),
        scored(fact(2, "user", "finds too big", "suvs", "suvs", "PRODUCT", "2026-08-16"), 0.04),
        scored(fact(3, "user", "drives", "honda civic", "honda civic", "PRODUCT", "2026-03-01"), 0.03),
    ]
    groups = group_by_anchor(facts)
    assert render(groups, anchor_entities(groups)) == REFERENCE_BLOCK


def test_ref_groups_by_anchor_ordered_by_best_fact() -> None:
    a1 = scored(fact(1, "user", "likes", "tea", "tea", "FOOD", "2026-01-01"), 0.05)
    b1 = scored(fact(2, "user", "drives", "civic", "civic", "PRODUCT", "2026-01-01"), 0.04)
    a2 = scored(fact(3, "tea", "is", "green", "tea", "FOOD", "2026-01-01"), 0.03)
    groups = group_by_anchor([a1, b1, a2])
    assert [[s.fact.id for s in g] for g in groups] == [[1, 3], [2]]
    text = render(groups, anchor_entities(groups))
    assert text.index("user likes tea") < text.index("tea is green") < text.index("user drives civic")
    assert text.endswith("# ENTITIES\n- tea (FOOD)\n- civic (PRODUCT)")


def test_ref_empty_context_when_nothing_matched() -> None:
    assert render([], []) == ""


@given(st.text(), st.text(), st.text())
def test_no_stored_text_can_break_out_of_its_line(subject: str, predicate: str, obj: str) -> None:
    block = render(
        [[scored(fact(1, subject, predicate, obj, "x" + obj, "OTHER", "2026-01-01"), 0.1)]],
        [],
    )
    lines = block.split("\n")
    fact_lines = [line for line in lines if line.startswith("- ")]
    assert len(fact_lines) == 1
    assert [line for line in lines if line.startswith("#")] == [
        "# FACTS  (format: fact (valid: from – to))",
        "# ENTITIES",
    ]
    for separator in ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"):
        assert separator not in block


def test_collapse_line_examples() -> None:
    assert collapse_line("a\nb\r\n# ENTITIES\t c\u2028d") == "a b # ENTITIES c d"
    assert collapse_line("evil\u202eoverride") == "eviloverride"
    assert collapse_line("  \n ") == ""


@given(st.text())
def test_collapse_line_fast_path_agrees_with_the_character_walk(text: str) -> None:
    walked = "".join(
        " " if unicodedata.category(c) in {"Cc", "Zs", "Zl", "Zp"} else c
        for c in text
        if c not in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    )
    assert collapse_line(text) == " ".join(walked.split())


# --- text ----------------------------------------------------------------------------------------


@given(st.text())
def test_terms_of_a_normalized_span_are_its_keyword_terms(query: str) -> None:
    for span in name_spans(normalize_query(query))[:50]:
        assert normalized_terms(span) == keyword_terms(span)


def spans_one_by_one(normalized: str) -> dict[str, str]:
    """The definition: every token range up to the name limits, then each span's terms by regex."""
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", normalized)]
    spans: dict[str, str] = {}
    for i, (start, _) in enumerate(tokens):
        for _, end in tokens[i : i + MAX_NAME_TOKENS]:
            if end - start > MAX_NAME_CHARS:
                break
            span = normalized[start:end]
            spans.setdefault(span, " ".join(normalized_terms(span)))
    return spans


@given(st.text(alphabet=st.sampled_from("ab_1 .-+é\u00a0\u3000x")) | st.text())
def test_spans_with_their_terms_match_the_span_by_span_definition(query: str) -> None:
    normalized = normalize_query(query)
    assert name_spans_with_terms(normalized) == spans_one_by_one(normalized)
    assert name_spans(normalized) == list(spans_one_by_one(normalized))


_OFFSETS = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)))


@given(st.datetimes(timezones=st.just(UTC) | _OFFSETS))
def test_a_rendered_day_is_strftimes(moment: datetime) -> None:
    """The day of the moment in its own zone, as `strftime` writes it (years before 1000 unpadded)."""
    assert day(moment) == moment.strftime("%Y-%m-%d")


def test_normalize_name() -> None:
    assert normalize_name("  Breaking\tBad ") == "breaking bad"
    assert normalize_name("ＮＥＴＦＬＩＸ") == "netflix"


@pytest.mark.parametrize(
    ("query", "name", "found"),
    [
        ("how do I start", "art", False),
        ("I love art", "art", True),
        ("art.", "art", True),
        ("smart art deco", "art deco", True),
        ("i write c++ daily", "c++", True),
        ("i write c++daily", "c++", True),
        ("my node.js app", "node.js", True),
        ("my node.jsx app", "node.js", False),
        ("the (x) factor", "(x)", True),
        ("only 50% off", "50%", True),
        ("150% sure", "50%", False),
        ("is .* a regex", ".*", True),
        ("'; drop table x;--", "'; drop table x;--", True),
        ("netflix's best", "netflix", True),
    ],
)
def test_name_spans_are_literal_word_boundary_matches(query: str, name: str, found: bool) -> None:
    assert (name in name_spans(normalize_query(query))) is found


def test_keyword_terms_are_safe_for_tsquery() -> None:
    assert keyword_terms("What's the RX-7800's price? 'x' | !y & z:*") == [
        "what",
        "s",
        "the",
        "rx",
        "7800",
        "price",
        "x",
        "y",
        "z",
    ]


def test_normalize_query_drops_nul_and_lone_surrogates() -> None:
    assert normalize_query("a\x00b\ud800c") == "a b?c"


# --- options and SQL -----------------------------------------------------------------------------


def test_options_defaults_are_the_references() -> None:
    options = RecallOptions()
    assert (options.facts_in_context, options.min_confidence, options.anchor.vector_top_k) == (8, 0.5, 3)
    # the reference's anchorVectorMin (0.75) is a cosine on one model's scale: the default is the gap rule
    assert (options.anchor.vector_min, options.anchor.vector_gap, options.rrf_k) == (None, 0.5, 60)
    with pytest.raises(LimitError):
        RecallOptions(facts_in_context=0)
    with pytest.raises(ConfigurationError):
        options.with_overrides({"nope": 1})


def test_each_knob_has_one_dotted_name_and_one_place() -> None:
    options = RecallOptions()
    groups = {f.name for f in dataclasses.fields(RecallOptions) if dataclasses.is_dataclass(getattr(options, f.name))}
    assert groups == {"vector", "anchor", "entities", "keyword", "date", "conversation", "recent"}
    for group in groups:  # each group says its own name, as its errors do
        assert getattr(options, group).group == group
    assert len(OPTION_NAMES) == len(set(OPTION_NAMES))
    assert {name.partition(".")[0] for name in OPTION_NAMES if "." in name} == groups
    assert set(ADAPTIVE) <= set(OPTION_NAMES)
    changed = options.with_overrides({"anchor.hops": 1, "entities.hub_min_share": 0.3, "rrf_k": 30})
    assert changed == RecallOptions(anchor=AnchorOptions(hops=1), entities=EntitiesOptions(hub_min_share=0.3), rrf_k=30)
    assert (changed.value("anchor.hops"), changed.value("rrf_k"), changed.anchor.vector_top_k) == (1, 30, 3)
    assert options.with_overrides({}) is options


def test_an_unknown_or_old_option_name_is_a_configuration_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"'anchor_hops' \(did you mean 'anchor\.hops'\?\); known: .*rrf_k"):
        RecallOptions().with_overrides({"anchor_hops": 1})
    with pytest.raises(ConfigurationError, match=r"entities\.hub_min_share"):
        RecallOptions().with_overrides({"hub_min_share": 0.3})
    with pytest.raises(ConfigurationError, match="'anchor' "):  # a group is no knob: one name per knob
        RecallOptions().with_overrides({"anchor": AnchorOptions(hops=1)})
    with pytest.raises(ConfigurationError, match="unknown recall option 3"):
        RecallOptions().with_overrides({3: 1})  # type: ignore[dict-item]


def test_a_group_checks_its_own_knobs_by_their_dotted_names() -> None:
    with pytest.raises(ArgumentTypeError, match=r"anchor\.hops must be an int"):
        AnchorOptions(hops="1")  # type: ignore[arg-type]
    with pytest.raises(LimitError, match=r"anchor\.hops must be 1 or 2"):
        RecallOptions().with_overrides({"anchor.hops": 3})
    with pytest.raises(LimitError, match=r"keyword\.candidates must be between 1 and 1000"):
        KeywordOptions(candidates=0)
    with pytest.raises(LimitError, match="must be a number, got nan"):
        EntitiesOptions(hub_min_share=float("nan"))
    with pytest.raises(ArgumentTypeError, match=r"anchor must be AnchorOptions\(\.\.\.\), got"):
        RecallOptions(anchor={"hops": 1})  # type: ignore[arg-type]


def test_every_fragment_filters_tenant_liveness_and_confidence() -> None:
    plan = RecallPlan(query=True, embedding=True)
    text = hits_statement("memsoda", plan, SIGNAL_NAMES).as_string(None)  # every signal, recency too
    for cte in ("vector_hits AS", "hop1 AS", "hop2 AS", "keyword_pool AS", "recent_hits AS"):
        body = text[text.index(cte) :]
        end = re.search(r"\n    [a-z_0-9]+ AS \(| SELECT 'vector'", body[len(cte) :])
        assert end is not None, cte
        body = body[: end.start() + len(cte)]
        assert "f.dataset = %(dataset)s AND f.project = %(project)s" in body, cte
        assert "f.confidence >= %(min_confidence)s" in body, cte
        assert "f.invalid_at > %(at)s" in body, cte


def test_statement_is_composed_with_identifiers_not_pasted_names() -> None:
    hostile = 'x"; DROP TABLE facts; --'
    text = hits_statement(hostile, FULL_PLAN, planned_signals(FULL_PLAN)).as_string(None)
    assert '"x""; DROP TABLE facts; --".facts' in text


def test_statistics_are_refreshed_when_the_facts_table_doubles() -> None:
    assert not statistics_stale(0, 63)  # too small to matter
    assert statistics_stale(0, 64)  # never analyzed, ~256 facts
    assert not statistics_stale(100, 199)
    assert statistics_stale(100, 200)


def _request(query: str | None, embedding: bool, options: RecallOptions) -> RecallRequest:
    at = datetime(2026, 6, 1, tzinfo=UTC)
    vector = (0.0, 1.0) if embedding else None
    return RecallRequest(scope=Scope(dataset="d", project="p"), query=query, embedding=vector, options=options, at=at)


def _every_recall_plan() -> set[RecallPlan]:
    plans = {
        plan_for(_request(query, embedding, DEFAULT_OPTIONS.with_overrides({"anchor.hops": hops})))
        for query, embedding, hops in itertools.product(("q", None), (True, False), (1, 2))
    }
    plans.add(
        plan_for(_request("q", True, DEFAULT_OPTIONS.with_overrides({"recent.candidates": 50})))
    )  # the recency list beside a query
    assert len(plans) == 8  # every statement a recall can run
    return plans


def test_compiled_recall_statements_are_what_psycopg_would_send() -> None:
    """Compiling (`runner.compiled`) gives the text and parameter order psycopg's own reading of
    `%(name)s` gives, read once instead of at every run."""
    from psycopg._queries import PostgresQuery
    from psycopg.adapt import Transformer

    for plan in _every_recall_plan():
        for group, statement in zip(recall_groups(plan), recall_statements("memsoda", plan), strict=True):
            composed = hits_statement("memsoda", plan, group)
            query = PostgresQuery(Transformer())
            query.convert(composed, dict.fromkeys(statement.names))
            assert statement.query == query.query
            assert statement.names == tuple(query._order or ())


def test_recall_statements_take_names_of_any_length_quoted_as_they_are() -> None:
    """No byte budget: a 63-character schema and 200-character scope names (the limits), with a
    `%` (psycopg's placeholder sign) and a quote, reach the text unchanged, and only the statement's
    own placeholders become `$n`."""
    schema = "s%" * 31 + "s"
    named = Scope(dataset="d%(x)s" * 33 + "dd", project="p'" * 100)
    assert (len(schema), len(named.dataset), len(named.project)) == (63, 200, 200)
    for plan in _every_recall_plan():
        for scope in (None, named):
            for statement in recall_statements(schema, plan, ScopeAccess(named=scope)):
                text = statement.as_string()
                assert f'"{schema}".facts' in text
                numbers = {int(n) for n in re.findall(r"\$(\d+)", text)}
                assert numbers == set(range(1, len(statement.names) + 1)), plan
                assert scope or "$" in text.split("dataset = ")[1][:3]  # shared statements: the scope is bound
        own = " ".join(statement.as_string() for statement in recall_statements(schema, plan, ScopeAccess(named=named)))
        assert "'" + named.project.replace("'", "''") + "'" in own  # named in every tenant predicate
        assert "'" + named.dataset + "'" in own
        assert "dataset" not in {
            name for st in recall_statements(schema, plan, ScopeAccess(named=named)) for name in st.names
        }


def test_named_statements_are_the_ones_composed_for_the_scope_itself() -> None:
    """A large scope's statements come from one template with its names put in (`for_scope`): the
    same bytes and parameters as composing them for the scope, whatever its names hold (quotes, a
    backslash, `%`, `$1`, non-ASCII, the template's own names inside them)."""
    from memsoda_core.recall.fragments import fragment
    from memsoda_core.recall.statements import TEMPLATE_SCOPE, facts_statement, rendered
    from memsoda_core.store.fact_columns import fact_columns
    from memsoda_core.store.tenant_index import tenant_key

    scopes = [
        Scope(dataset="a'b\\c%(x)s", project="é$1 %%"),
        Scope(dataset=TEMPLATE_SCOPE.project, project=TEMPLATE_SCOPE.dataset),
        Scope(dataset="d", project="x" + TEMPLATE_SCOPE.project),
    ]
    for plan in _every_recall_plan():
        for scope in scopes:
            for default_partitions, leaves in ((False, False), (True, False), (False, True)):
                access = ScopeAccess(named=scope, default_partitions=default_partitions, leaves=leaves)
                composed = tuple(rendered(hits_statement("s", plan, group, access)) for group in recall_groups(plan))
                assert recall_statements("s", plan, access) == composed
    for scope, leaves in [(scope, leaves) for scope in scopes for leaves in (False, True)]:
        kept = ScopeAccess(named=scope, leaves=leaves)
        direct = rendered(
            fragment(
                """SELECT {fact_columns}
           FROM {facts} f
           JOIN {entities} a ON {scope_a} AND a.id = f.anchor_id
           WHERE {scope_f} AND f.id = ANY(%(fact_ids)b::bigint[])""",
                "s",
                access=kept,
                fact_columns=fact_columns("s", tables=kept.tables("s"), named=scope),
            )
        )
        assert facts_statement("s", ScopeAccess(named=scope, kept_named=scope, leaves=leaves)) == direct
        assert (tenant_key(scope) in direct.query.decode()) is leaves  # its leaves named


def test_compiling_reads_placeholders_in_sql_text_only() -> None:
    from memsoda_core.runner.compiled import compiled

    statement = sql.SQL("SELECT {l}, %(a)s, '%%', %(b)b, %(a)s FROM {t}").format(
        l=sql.Literal("50%(a)s"), t=sql.Identifier("we%ird")
    )
    done = compiled(statement)
    assert done.query == b"""SELECT '50%(a)s', $1, '%', $2, $1 FROM "we%ird\""""
    assert (done.names, done.binary) == (("a", "b"), (False, True))
    assert done.bind({"a": 1, "b": [2], "c": 3}) == (1, [2])
    assert type(done.bind({"a": 1, "b": [2]})[1]).__name__ == "BinaryList"  # a plain list goes binary, as %b asks
    with pytest.raises(psycopg.ProgrammingError, match="missing: b"):
        done.bind({"a": 1})
    for wrong in ("SELECT %s", "SELECT %(a)t", "SELECT %(a)s, %(a)b", "SELECT 5 % 2"):
        with pytest.raises(ValueError):
            compiled(sql.SQL(wrong))


def test_scope_sizes_expire_forget_and_stay_bounded() -> None:
    from memsoda_core.layouts.access import ScopeSize
    from memsoda_core.recall.planning import ScopeSizes
    from memsoda_core.validation import Scope

    a, b, c = (Scope(dataset="d", project=p) for p in "abc")
    sizes = ScopeSizes(ttl_s=60.0, size=2)
    assert sizes.get(a) is None
    sizes.put(a, ScopeSize(10))
    sizes.put(b, ScopeSize(20))
    assert sizes.get(a) == ScopeSize(10)  # a is now the most recently used
    sizes.put(c, ScopeSize(30))  # over the bound: b, the least recently used, goes
    assert (sizes.get(a), sizes.get(b), sizes.get(c)) == (ScopeSize(10), None, ScopeSize(30))
    sizes.forget(a)
    assert sizes.get(a) is None
    expired = ScopeSizes(ttl_s=0.0)
    expired.put(a, ScopeSize(10))
    assert expired.get(a) is None  # trusted for no time at all


def test_a_write_forgets_a_scope_size_not_where_its_shards_are() -> None:
    from memsoda_core.layouts.access import ScopeSize
    from memsoda_core.layouts.shards import ShardPlace
    from memsoda_core.recall.planning import ScopeSizes
    from memsoda_core.validation import Scope

    scope = Scope(dataset="d", project="p")
    place = ShardPlace(relations=(("facts", "facts_102008"),), shard_ids=(102008,), host="w1", port=5432)
    sizes = ScopeSizes()
    sizes.put(scope, ScopeSize(10, shards=place))
    sizes.forget(scope)  # what a write does
    assert sizes.get(scope) is None and sizes.place(scope) == place
    sizes.put(scope, ScopeSize(11, shards=place))
    sizes.forget_place(scope)  # a read where it was said they are did not find them
    assert sizes.get(scope) is None and sizes.place(scope) is None
    sizes.put(scope, ScopeSize(11, shards=place))
    sizes.forget_all()  # the store's layout changed
    assert sizes.place(scope) is None


def test_the_date_statement_is_planned_for_its_window() -> None:
    from memsoda_core.recall.planning import statement_planning
    from memsoda_core.recall.statements import recall_groups
    from memsoda_core.runner.steps import Planning

    now = datetime(2026, 6, 1, tzinfo=UTC)
    dated = plan_for(replace(_request("what did I do last week", True, DEFAULT_OPTIONS), at=now))
    groups = recall_groups(dated)
    assert any("date" in group for group in groups) and len(groups) == len(recall_statements("s", dated))
    for group in groups:
        expected = Planning.FRESH if "date" in group else Planning.GENERIC
        assert statement_planning(group, Planning.GENERIC) is expected
    assert all(statement_planning(g, Planning.CACHED) is Planning.CACHED for g in groups if "date" not in g)


def test_a_long_message_is_queried_by_its_head() -> None:
    from memsoda_core.recall.signals.conversation import conversation_text

    ask = "Please summarise this report for me."
    long = f"  {ask} " + "Revenue grew this quarter. " * 300
    query = message_query(long)
    assert len(query) <= MAX_QUERY_CHARS < len(long)
    assert query.startswith(ask) and long.strip().startswith(query)
    assert message_query(query) == query  # idempotent: an adapter's query, cut again, is itself
    assert message_query(" short question? ") == "short question?"
    # the block passes the chat with the current message: its turn is the (cut) query, not a turn before it
    turns = (("user", "where is my car?"), ("user", long))
    assert conversation_text(turns, query, 2) == "where is my car?"
    assert conversation_text(turns, "something else", 1) == query


def test_an_item_read_is_checked_once_into_the_one_form_its_operation_takes() -> None:
    """`CHECKS[method]` (what LangGraph's batch runs before any write) returns the read's checked
    arguments, and the operation builder takes only those: one list of parameters, one check."""
    search = calls.CHECKS["search_items"](("notes",), project="p", query="milk", filter={"n": 1}, limit=5)
    assert search == calls.ItemSearch(
        project="p",
        dataset=None,
        prefix=("notes",),
        query="milk",
        conditions=(Condition(("n",), "$eq", "1"),),
        limit=5,
        offset=0,
        refresh=False,
    )
    get = calls.CHECKS["get_item"](["a"], "k", dataset="d", project="p", refresh_ttl=True)
    assert get == calls.ItemGet(scope=Scope(dataset="d", project="p"), namespace=("a",), key="k", refresh=True)
    listing = calls.CHECKS["list_item_namespaces"](match=[("prefix", ["a"])], project="p", dataset="d")
    assert listing == calls.NamespaceListing(
        project="p", dataset="d", match=NamespaceMatch((1,), ("a",), 1), max_depth=None, limit=100, offset=0
    )
    for builder, checked in (
        (calls.search_items_op, "search"),
        (calls.get_item_op, "get"),
        (calls.list_item_namespaces_op, "listing"),
    ):
        assert list(inspect.signature(builder).parameters) == ["context", checked]
    with pytest.raises(ValidationError, match="refresh_ttl"):
        calls.CHECKS["search_items"](project="p", refresh_ttl="yes")
