"""Operations driven with scripted replies (no database, no model): what they ask, in what order,
and what they decide from the replies. The same operations run against the real server elsewhere."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from memsoda_core import ops
from memsoda_core.errors import EmbeddingError, IntervalError, NotLiveError, StoreError, ValidationError
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.ops.maintenance import ensure_tenant_indexes
from memsoda_core.runner.steps import EmbedDocuments, Emit, Execute, OutsideTransaction, Progress, ReadAside
from memsoda_core.store import statements as sql_store
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, validate_facts
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.decisions import End, UnorderedValueError, new, old, plan_batch
from tests.scripted import Script, drive, params_of

ARRAYS = WriteForm.ARRAYS
INFO = StoreInfo(schema="memsoda", model="scripted", dimensions=4, text_search_config="english")
SCOPE = Scope(dataset="d", project="p")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
FACTS = [
    {"subject": "user", "predicate": "lives in", "object": "amsterdam", "object_type": "PLACE"},
    {"subject": "user", "predicate": "drives", "object": "tesla"},
]


def nothing_met(request: object) -> list[sql_reconcile.Met]:
    """`met_facts` of a store holding nothing the batch meets: every input its own group."""
    count = len(params_of(request)["subjects"])  # type: ignore[arg-type]
    return [sql_reconcile.Met(i, i, i, False, None, None, None, None) for i in range(1, count + 1)]


def write_script(known: dict[str, int]) -> Script:
    """A store that knows the entities `known` and creates every other name it is asked for."""
    created: dict[str, int] = {}

    def insert_entities(request: object) -> list[tuple[str, int]]:
        wanted = params_of(request)["names"]  # type: ignore[arg-type]
        for name in wanted:
            created.setdefault(name, 100 + len(created))
        return [(name, created[name]) for name in wanted]

    def insert_facts(request: object) -> list[sql_write.InsertedFact]:
        count = len(params_of(request)["subjects"])  # type: ignore[arg-type]
        return [sql_write.InsertedFact(id=10 + i, lexemes=["user"]) for i in range(count)]

    script = Script(dimensions=INFO.dimensions)
    script.on(sql_reconcile.lock_relations(INFO.schema), [sql_reconcile.Locked(locks=1, learned_at=NOW)])
    script.on(sql_reconcile.met_facts(INFO.schema), nothing_met)
    known_rows = sorted(known.items())
    script.on(sql_write.known_entities(INFO.schema), known_rows)
    script.on(sql_write.known_entities(INFO.schema, lock=True), known_rows)
    script.on(inserts.ENTITIES.statement(INFO.schema, ARRAYS), insert_entities)
    script.on(inserts.FACTS.statement(INFO.schema, ARRAYS), insert_facts)
    script.on(sql_write.facts_pages(), [sql_write.TablePages(analyzed=100, current=100)])
    script.on(sql_write.bump_scope(INFO.schema), [(2,)])
    return script


def test_a_write_embeds_before_it_takes_a_connection_and_only_names_the_scope_lacks() -> None:
    conversation = drive(ops.add_facts(INFO, SCOPE, FACTS), write_script({"user": 1}))
    requests = conversation.requests
    assert isinstance(requests[0], ReadAside)  # which entities exist: a borrowed connection, returned at once
    embed = conversation.index(EmbedDocuments)
    first_statement = conversation.index(Execute)
    assert 0 < embed < first_statement  # no connection or transaction is held while the model runs
    texts = requests[embed].texts  # type: ignore[union-attr]
    assert texts[2:] == ("amsterdam", "tesla")  # the facts' texts, then only the new names
    assert len(texts) == 4
    inserted = [
        r for r in requests if isinstance(r, Execute) and r.statement == inserts.ENTITIES.statement(INFO.schema, ARRAYS)
    ]
    assert [params_of(r)["names"] for r in inserted] == [["amsterdam", "tesla"]]
    assert conversation.result == [10, 11]


def test_a_write_counts_its_rows_last_in_a_fixed_order() -> None:
    """Counts are bumped at the end (entities by name, lexemes, then the scope), so two writers into
    one scope wait for each other only from there to their commits, and never deadlock."""
    conversation = drive(ops.add_facts(INFO, SCOPE, FACTS), write_script({}))
    order = [
        conversation.index(Execute, inserts.FACTS.statement(INFO.schema, ARRAYS)),
        conversation.index(Execute, inserts.BUMP_ENTITIES.statement(INFO.schema, ARRAYS)),
        conversation.index(Execute, inserts.LEXEMES.statement(INFO.schema, ARRAYS)),
        conversation.index(Execute, sql_write.bump_scope(INFO.schema)),
    ]
    assert -1 not in order and order == sorted(order)
    bump = conversation.requests[order[1]]
    assert params_of(bump)["names"] == sorted(params_of(bump)["names"])
    assert dict(zip(params_of(bump)["names"], params_of(bump)["types"], strict=True))["amsterdam"] == "PLACE"


def test_a_failed_embedding_writes_nothing() -> None:
    script = write_script({})
    script.embed_error = EmbeddingError("down")
    seen: list[object] = []

    def answer(request: object) -> object:
        seen.append(request)
        return script(request)  # type: ignore[arg-type]

    with pytest.raises(EmbeddingError):
        drive(ops.add_facts(INFO, SCOPE, FACTS), answer)
    assert not any(isinstance(r, Execute) for r in seen)


def test_invalid_input_raises_before_any_request() -> None:
    op = ops.add_facts(INFO, SCOPE, [{"subject": "", "predicate": "x", "object": "y"}])
    with pytest.raises(ValidationError):
        next(op)


def test_an_entity_another_writer_created_meanwhile_is_found_in_a_second_round() -> None:
    script = write_script({})
    rounds: list[list[str]] = []

    def racing(request: object) -> list[tuple[str, int]]:
        wanted = params_of(request)["names"]  # type: ignore[arg-type]
        rounds.append(wanted)
        if len(rounds) == 1:  # the other writer's "tesla" committed while this statement waited
            return [(name, 100 + i) for i, name in enumerate(wanted) if name != "tesla"]
        return [(name, 200 + i) for i, name in enumerate(wanted)]

    script.rules = [rule for rule in script.rules if rule[0] != inserts.ENTITIES.statement(INFO.schema, ARRAYS)]
    script.on(inserts.ENTITIES.statement(INFO.schema, ARRAYS), racing)
    drive(ops.add_facts(INFO, SCOPE, FACTS), script)
    assert rounds == [["amsterdam", "tesla", "user"], ["tesla"]]


def test_entities_that_never_settle_are_a_store_error() -> None:
    script = write_script({})
    script.rules = [rule for rule in script.rules if rule[0] != inserts.ENTITIES.statement(INFO.schema, ARRAYS)]
    script.on(inserts.ENTITIES.statement(INFO.schema, ARRAYS), [])
    with pytest.raises(StoreError, match="try the write again"):
        drive(ops.add_facts(INFO, SCOPE, FACTS), script)


def test_a_scope_under_the_threshold_gets_no_index_build() -> None:
    conversation = drive(ensure_tenant_indexes(INFO, SCOPE), Script())  # nothing missing
    assert conversation.result == []
    assert not any(isinstance(r, OutsideTransaction) for r in conversation.requests)


def test_an_index_build_is_skipped_when_another_session_holds_the_lock() -> None:
    missing = [
        sql_tenant_index.MissingIndex(name=i.name, present=False) for i in sql_tenant_index.tenant_indexes(SCOPE)
    ]
    script = Script().on(sql_tenant_index.missing_statement(INFO.schema), missing)
    script.on(sql_tenant_index.lock_statement(), [(False,)])
    conversation = drive(ensure_tenant_indexes(INFO, SCOPE), script)
    assert conversation.result == []
    ddl = [r for r in conversation.requests if isinstance(r, OutsideTransaction)]
    assert [r.statement for r in ddl] == [sql_tenant_index.lock_statement()]  # no CREATE INDEX


def test_an_index_build_stops_at_the_first_failure_and_releases_its_lock() -> None:
    indexes = sql_tenant_index.tenant_indexes(SCOPE)
    missing = [sql_tenant_index.MissingIndex(name=i.name, present=False) for i in indexes]
    script = Script().on(sql_tenant_index.missing_statement(INFO.schema), missing)
    script.on(sql_tenant_index.lock_statement(), [(True,)])
    script.on(sql_tenant_index.create_statement(INFO.schema, SCOPE, indexes[0]), [])
    script.on(sql_tenant_index.create_statement(INFO.schema, SCOPE, indexes[1]), None)  # failed (lock timeout)
    conversation = drive(ensure_tenant_indexes(INFO, SCOPE), script)
    assert conversation.result == [indexes[0].name]
    statements = [r.statement for r in conversation.requests if isinstance(r, OutsideTransaction)]
    assert sql_tenant_index.create_statement(INFO.schema, SCOPE, indexes[2]) not in statements
    assert statements.count(sql_tenant_index.lock_statement(release=True)) == 1


def test_export_hands_its_lines_to_the_runner_page_by_page() -> None:
    fact = validate_facts(FACTS[:1])[0]
    row = {
        "id": 7,
        "subject": fact.subject,
        "predicate": fact.predicate,
        "object": fact.object,
        "object_type": fact.object_type,
        "subject_type": "PERSON",
    }
    conversation = drive(ops.export_jsonl(INFO, SCOPE), lambda r: _export_reply(r, row))
    emitted = [line for r in conversation.requests if isinstance(r, Emit) for line in r.lines]
    assert conversation.result == len(emitted) == 1
    record = json.loads(emitted[0])
    assert record["subject"] == "user" and record["subject_type"] == "PERSON" and record["id"] == 7


def _export_reply(request: object, row: dict[str, object]) -> object:
    statement = getattr(request, "statement", None)
    if statement == sql_store.export_facts(INFO.schema):
        return [_exported(row)]  # the runner builds these from the named columns
    return []


def _exported(row: dict[str, object]) -> sql_store.ExportedFact:
    from memsoda_core.store.fact_columns import FACT_COLUMNS

    columns: dict[str, object] = {column.name: None for column in FACT_COLUMNS}
    columns.update(
        {
            "valid_at": NOW,
            "confidence": 1.0,
            "mentions": [],
            "anchor": "user",
            "times_seen": 1,
            **{k: v for k, v in row.items() if k != "subject_type"},
        }
    )
    return sql_store.ExportedFact(subject_type=str(row["subject_type"]), **columns)


def test_an_import_reports_progress_per_batch_and_bumps_counts_once() -> None:
    facts = validate_facts(FACTS * 3)
    conversation = drive(
        ops.import_records(INFO, SCOPE, facts, [], batch_size=2, rebuild_index=False), write_script({"user": 1})
    )
    assert [r.done for r in conversation.requests if isinstance(r, Progress)] == [2, 2, 2]
    bumps = [
        r for r in conversation.requests if isinstance(r, Execute) and r.statement == sql_write.bump_scope(INFO.schema)
    ]
    assert [params_of(r)["delta"] for r in bumps] == [6]
    assert not any(isinstance(r, ReadAside) for r in conversation.requests)  # inside the import's transaction


# --- reconciling writes (issue 17) -----------------------------------------------------------------


JAN, MAR = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 3, 1, tzinfo=UTC)


def met(
    ord_: int, relation: int, value: int, *stored: tuple[int, bool, datetime], single: bool = False
) -> list[sql_reconcile.Met]:
    if not stored:
        return [sql_reconcile.Met(ord_, relation, value, single, None, None, None, None)]
    return [sql_reconcile.Met(ord_, relation, value, single, i, same, at, None) for i, same, at in stored]


def test_a_write_locks_its_relations_before_it_reads_them_and_after_it_embeds() -> None:
    conversation = drive(ops.add_facts(INFO, SCOPE, FACTS), write_script({}))
    order = [
        conversation.index(EmbedDocuments),
        conversation.index(Execute, sql_reconcile.lock_relations(INFO.schema)),
        conversation.index(Execute, sql_reconcile.met_facts(INFO.schema)),
        conversation.index(Execute, inserts.ENTITIES.statement(INFO.schema, ARRAYS)),
        conversation.index(Execute, inserts.FACTS.statement(INFO.schema, ARRAYS)),
    ]
    assert -1 not in order and order == sorted(order)
    first_execute = conversation.index(Execute)
    assert first_execute == order[1]  # the locks are the transaction's first statement


def test_a_duplicate_write_inserts_nothing_and_merges_into_the_live_fact() -> None:
    script = write_script({"user": 1, "amsterdam": 2})
    rows = met(1, 1, 1, (7, True, JAN))
    script.rules.insert(0, (sql_reconcile.met_facts(INFO.schema), lambda _request: rows))
    conversation = drive(ops.add_facts(INFO, SCOPE, FACTS[:1]), script)
    assert conversation.result == [7]
    assert conversation.index(Execute, inserts.FACTS.statement(INFO.schema, ARRAYS)) == -1
    assert conversation.index(Execute, sql_write.bump_scope(INFO.schema)) == -1  # no count changes
    (merge,) = [
        r
        for r in conversation.requests
        if isinstance(r, Execute) and r.statement == sql_reconcile.merge_facts(INFO.schema)
    ]
    assert params_of(merge)["ids"] == [7] and params_of(merge)["repeats"] == [1]


def test_plan_a_new_single_value_ends_the_live_one_at_its_start() -> None:
    (fact,) = validate_facts([{**FACTS[1], "valid_at": MAR}])
    plan = plan_batch([fact], met(1, 1, 1, (7, False, JAN), single=True), learned=NOW)
    assert plan.ends == [End(old(7), MAR, new(0))] and len(plan.inserts) == 1


def test_plan_an_older_single_value_is_stored_as_history() -> None:
    (fact,) = validate_facts([{**FACTS[1], "valid_at": JAN}])
    plan = plan_batch([fact], met(1, 1, 1, (7, False, MAR), single=True), learned=NOW)
    assert plan.inserts[0].invalid_at == MAR and plan.ends == [End(new(0), MAR, old(7))]


def test_plan_two_values_with_one_start_cannot_be_ordered() -> None:
    (fact,) = validate_facts([{**FACTS[1], "valid_at": JAN}])
    with pytest.raises(IntervalError):
        plan_batch([fact], met(1, 1, 1, (7, False, JAN), single=True), learned=NOW)


def test_plan_names_the_input_it_cannot_order() -> None:
    """`remember` rejects that input alone (`learning.applying`): the error says which it is."""
    facts = validate_facts([{**FACTS[1], "object": "bmw", "valid_at": MAR}, {**FACTS[1], "valid_at": JAN}])
    rows = [*met(1, 1, 1, (7, False, JAN), single=True), *met(2, 1, 2, (7, False, JAN), single=True)]
    with pytest.raises(UnorderedValueError) as raised:
        plan_batch(facts, rows, learned=NOW)
    assert raised.value.position == 1 and isinstance(raised.value, IntervalError)


def test_plan_an_equal_write_moves_the_live_start_back_to_the_end_of_its_own_ended_run() -> None:
    """The live fact 7 (from MAR) and an ended run 8 of the same value (to FEB): an equal write
    without a start moves 7's start back to FEB, not over 8 (the value would hold twice)."""
    feb = datetime(2025, 2, 1, tzinfo=UTC)
    (fact,) = validate_facts([FACTS[1]])
    rows = [
        sql_reconcile.Met(1, 1, 1, True, 7, True, MAR, None),
        sql_reconcile.Met(1, 1, 1, True, 8, True, datetime(2024, 6, 1, tzinfo=UTC), feb),
    ]
    plan = plan_batch([fact], rows, learned=NOW)
    assert plan.resolved == [old(7)] and plan.merges[7].valid_at == feb


def test_plan_within_a_batch_equal_facts_fold_and_a_later_value_replaces_an_earlier_one() -> None:
    facts = validate_facts(
        [
            {**FACTS[1], "valid_at": JAN, "confidence": 0.4},
            {**FACTS[1], "valid_at": MAR, "confidence": 0.8, "source_quote": "q"},
            {**FACTS[1], "object": "bmw", "valid_at": datetime(2025, 6, 1, tzinfo=UTC)},
        ]
    )
    rows = [*met(1, 1, 1, single=True), *met(2, 1, 1, single=True), *met(3, 1, 2, single=True)]
    plan = plan_batch(facts, rows, learned=NOW)
    assert plan.resolved == [new(0), new(0), new(1)]
    kept = plan.inserts[0]
    assert (kept.confidence, kept.valid_at, kept.source_quote, plan.seen[0]) == (0.8, JAN, "q", 2)
    assert kept.invalid_at == datetime(2025, 6, 1, tzinfo=UTC)
    assert plan.ends == [End(new(0), datetime(2025, 6, 1, tzinfo=UTC), new(1))]


def test_plan_a_value_placed_into_the_history_meets_the_ended_facts_too() -> None:
    """Stored: 7 from JAN to MAY (ended, learned earlier), 8 from MAY (live). A value from MAR ends
    7 there (memory keeps when it first learned 7 ended) and itself ends where 8 starts."""
    may = datetime(2025, 5, 1, tzinfo=UTC)
    rows = [
        sql_reconcile.Met(1, 1, 1, True, 7, False, JAN, may),
        sql_reconcile.Met(1, 1, 1, True, 8, False, may, None),
    ]
    (fact,) = validate_facts([{**FACTS[1], "valid_at": MAR}])
    plan = plan_batch([fact], rows, learned=NOW)
    assert plan.inserts[0].invalid_at == may
    assert sorted(plan.ends) == sorted([End(new(0), may, old(8)), End(old(7), MAR, new(0), ended_before=True)])


def test_plan_a_value_with_its_own_end_is_cut_at_the_next_start_and_one_end_per_fact() -> None:
    may = datetime(2025, 5, 1, tzinfo=UTC)
    facts = validate_facts(
        [
            {**FACTS[1], "object": "bmw", "valid_at": JAN, "invalid_at": datetime(2026, 1, 1, tzinfo=UTC)},
            {**FACTS[1], "object": "audi", "valid_at": MAR},
            {**FACTS[1], "object": "fiat", "valid_at": may},
        ]
    )
    rows = [*met(1, 1, 1, single=True), *met(2, 1, 2, single=True), *met(3, 1, 3, single=True)]
    plan = plan_batch(facts, rows, learned=NOW)
    assert [f.invalid_at for f in plan.inserts] == [MAR, may, None]
    assert sorted(plan.ends) == [End(new(0), MAR, new(1)), End(new(1), may, new(2))]


def test_plan_an_equal_value_folded_in_a_batch_moves_back_over_free_time_only() -> None:
    may = datetime(2025, 5, 1, tzinfo=UTC)
    facts = validate_facts(
        [
            {**FACTS[1], "valid_at": may},
            {**FACTS[1], "object": "bmw", "valid_at": JAN, "invalid_at": MAR},
            {**FACTS[1], "valid_at": datetime(2024, 1, 1, tzinfo=UTC)},
        ]
    )
    rows = [*met(1, 1, 1, single=True), *met(2, 1, 2, single=True), *met(3, 1, 1, single=True)]
    plan = plan_batch(facts, rows, learned=NOW)
    assert plan.resolved == [new(0), new(1), new(0)]
    assert (plan.inserts[0].valid_at, plan.inserts[1].invalid_at) == (MAR, MAR)  # where bmw ended


def test_supersede_of_a_fact_no_longer_live_writes_nothing_and_names_the_live_one() -> None:
    state = sql_reconcile.FactState(5, "user", "drives", "tesla", JAN, MAR, 6)
    script = write_script({})
    script.on(sql_reconcile.fact_state(INFO.schema), [tuple(vars(state).values())])
    script.on(sql_reconcile.fact_state(INFO.schema, lock=True), [state])
    script.on(sql_reconcile.chain_end(INFO.schema), [sql_reconcile.ChainEnd(9, None)])
    op = ops.supersede(INFO, SCOPE, 5, {**FACTS[1], "object": "bmw"})
    with pytest.raises(NotLiveError) as raised:
        drive(op, script)
    assert raised.value.live_id == 9 and "fact 9 is live now" in str(raised.value)


def _history(rng: random.Random) -> list[sql_reconcile.Met]:
    """A single-valued relation's stored history met by an input of value "a": facts one after
    another, each ending where the next starts or earlier (a gap), the last one live or ended."""
    rows: list[sql_reconcile.Met] = []
    at = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(days=rng.randrange(100))
    for fact_id in range(1, rng.randrange(8) + 1):
        start = None if fact_id == 1 and rng.random() < 0.3 else at
        at += timedelta(days=1 + rng.randrange(400))
        end = at - timedelta(days=rng.randrange(3)) if rng.random() < 0.4 else at  # a gap, or the next start
        value = rng.choice("abc")
        rows.append(sql_reconcile.Met(1, 1, 1, True, fact_id, value == "a", start, end))
    if rows and rng.random() < 0.7:
        rows[-1] = dataclasses.replace(rows[-1], invalid_at=None)
    return rows


def _read_from_learned(rows: list[sql_reconcile.Met], learned: datetime) -> list[sql_reconcile.Met]:
    """What `met_facts` reads for an open input without a start: the facts that hold at `learned` or
    after it, the one that ended last before, and the one of another value that ended last."""
    after = [row for row in rows if row.invalid_at is None or row.invalid_at > learned]
    before = sorted((row for row in rows if row not in after), key=lambda row: row.invalid_at or learned)
    last = before[-1:]
    last_other = [row for row in before if not row.same][-1:]
    return sorted({row.id: row for row in [*after, *last, *last_other]}.values(), key=lambda row: row.id or 0)


@pytest.mark.parametrize("seed", range(40))
def test_plan_a_value_without_a_start_needs_only_what_holds_when_learned_and_the_values_that_ended_last(
    seed: int,
) -> None:
    """The plan of an open input without a start is the same from `met_facts`' narrowed read as from
    the relation's whole history (which a write read before, at a cost growing with it)."""
    rng = random.Random(seed)
    rows = _history(rng)
    (fact,) = validate_facts([{**FACTS[1], "object": "a"}])
    whole = rows or [sql_reconcile.Met(1, 1, 1, True, None, None, None, None)]
    narrowed = _read_from_learned(rows, NOW) or whole
    assert plan_batch([fact], narrowed, learned=NOW) == plan_batch([fact], whole, learned=NOW)
