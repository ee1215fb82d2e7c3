"""What a batch of facts does to the facts its relations already hold (pure): which inputs are
stored, which resolve to an equal fact, which live facts a new value ends.

The rules, for every path that writes facts (`add_facts`, `supersede`, `import_jsonl`):
- An open input (no `invalid_at`) equal to a live fact (same subject, predicate and object, case
  folded) stores nothing and resolves to that fact (the oldest, if the store holds several). The
  fact keeps the higher confidence, the earlier start and its quote (the new one if it had none),
  and counts the repetition (`times_seen`; an import restores and does not count).
- An ended input (an exported history line) equal to a fact with the same interval resolves to it.
- A single-valued relation holds at most one value at any valid time, and the latest-started
  value holds from its start. A new value is placed into the relation's whole history (its ended
  facts too): it ends where the next value starts, if that is before its own end (`superseded_by`
  that one), and the value holding at its start (live or ended) ends there, superseded by it; an
  ended value's end moves earlier and memory keeps the time it first learned it ended. A value
  that never comes back is not revived: a value with its own end leaves the time after it empty.
  A new value equal to the one holding at its start (or starting with it) resolves to that fact;
  another value starting at the same instant cannot be ordered: `UnorderedValueError` (an
  `IntervalError`). An equal write with an earlier start moves the live fact's start back over
  time no other fact of the relation holds only (an ended run of its own value included).
- Inside one batch, the same rules hold between earlier and later inputs.

Time. A fact with no start (`valid_at` None) is true for as long as memory knows: it is the
earliest start, so an equal write without one makes the stored fact's start unknown too. A new
value without a start that ends a live one starts when memory learns it (`learned`, the write's
time after its locks), and the old value ends then: no `as_of` sees both; so does one of a
relation that has only ended values (no earlier time is free of them). Two values without a
start of one single-valued relation in one batch cannot be ordered: `UnorderedValueError`. A fact
with `starts_when_learned` (a `supersede` without `valid_at`) starts at `learned` too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from memsoda_core.errors import IntervalError
from memsoda_core.validation import ValidFact
from memsoda_core.writing.reconcile_statements import Met


class UnorderedValueError(IntervalError):
    """A value of a single-valued relation the batch cannot place: another value starts at the same
    instant, or two values of the batch have no start. `position` is the input's (0-based) index,
    so a caller that may drop inputs (`remember`) can reject that one alone and plan the rest."""

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(message)
        self.position = position


class Ref(NamedTuple):
    """A fact a plan names: a stored one (`kind` "old", `number` its id) or one it inserts ("new",
    `number` its index into `Plan.inserts`)."""

    kind: Literal["old", "new"]
    number: int


def old(fact_id: int) -> Ref:
    return Ref("old", fact_id)


def new(index: int) -> Ref:
    return Ref("new", index)


class End(NamedTuple):
    """A fact a plan ends: at `at`, superseded by `by` (None: ended, not replaced)."""

    fact: Ref
    at: datetime
    by: Ref | None
    ended_before: bool = False
    """A stored fact that had ended already (its end moves earlier): memory keeps the time it first
    learned that it ended (`expired_at`)."""


@dataclass
class Merge:
    """What equal writes fold into a stored fact (`writing.reconcile_statements.merge_facts`)."""

    confidence: float
    valid_at: datetime | None
    """None: no known start (the earliest)."""
    quote: str | None
    repeats: int


@dataclass
class Plan:
    """The batch's effect: facts to insert (with the input each came from and how often it was
    seen), each input's resolution, merges into stored facts, and the facts to end."""

    inserts: list[ValidFact] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    seen: list[int] = field(default_factory=list)
    resolved: list[Ref] = field(default_factory=list)
    merges: dict[int, Merge] = field(default_factory=dict)
    ends: list[End] = field(default_factory=list)


_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _key(start: datetime | None) -> datetime:
    """A start as it sorts: none (unknown) before every known one."""
    return _EARLIEST if start is None else start


def earliest(first: datetime | None, second: datetime | None) -> datetime | None:
    """The earlier of two starts; an unknown start (None) is the earliest."""
    return first if _key(first) <= _key(second) else second


def _merge_into(plan: Plan, fact_id: int, fact: ValidFact, repeat: int) -> None:
    merge = plan.merges.get(fact_id)
    if merge is None:
        plan.merges[fact_id] = Merge(fact.confidence, fact.valid_at, fact.source_quote, repeat)
        return
    merge.confidence = max(merge.confidence, fact.confidence)
    merge.valid_at = earliest(merge.valid_at, fact.valid_at)
    merge.quote = merge.quote if merge.quote is not None else fact.source_quote
    merge.repeats += repeat


def plan_batch(
    facts: Sequence[ValidFact], met: Sequence[Met], *, learned: datetime, count_repeats: bool = True
) -> Plan:
    """Apply the module's rules to `facts` in order, given the `Met` rows of the batch and the
    time memory learns them (`learned`)."""
    facts = [_learned_start(fact, learned) for fact in facts]
    rows: dict[int, list[Met]] = {}
    for row in met:
        rows.setdefault(row.ord, []).append(row)
    plan = Plan()
    repeat = 1 if count_repeats else 0
    batch = _Batch()
    ended_lines: dict[tuple[int, datetime | None, datetime], int] = {}  # an ended insert per value and interval
    replacing: set[int] = set()  # inserts that end another: their start is that one's end, kept
    for position, fact in enumerate(facts, start=1):
        group = rows[position]
        head = group[0]
        stored = [row for row in group if row.id is not None]
        if fact.invalid_at is not None:
            line = (head.value, fact.valid_at, fact.invalid_at)
            equal = next(
                (
                    row.id
                    for row in stored
                    if row.same and row.valid_at == fact.valid_at and batch.end_of(row) == fact.invalid_at
                ),
                None,
            )
            if equal is not None:
                _merge_into(plan, equal, fact, 0)
                plan.resolved.append(old(equal))
                continue
            if line in ended_lines:
                plan.resolved.append(new(ended_lines[line]))
                continue
        else:
            equal_row = next((row for row in stored if row.same and batch.end_of(row) is None), None)
            if equal_row is not None and equal_row.id is not None:
                if head.single_valued:
                    history = batch.spans(plan, stored, head)
                    fact = _start_over_free_time(fact, old(equal_row.id), equal_row.valid_at, history)
                _merge_into(plan, equal_row.id, fact, repeat)
                plan.resolved.append(old(equal_row.id))
                continue
            if head.value in batch.live_values:
                kept = plan.inserts[batch.live_values[head.value]]
                if head.single_valued:
                    holder = new(batch.live_values[head.value])
                    fact = _start_over_free_time(fact, holder, kept.valid_at, batch.spans(plan, stored, head))
                _fold_into_insert(plan, batch.live_values[head.value], fact, repeat, replacing)
                plan.resolved.append(new(batch.live_values[head.value]))
                continue
        spans: list[_Span] = []
        if head.single_valued:
            spans = batch.spans(plan, stored, head)
            if fact.valid_at is None and fact.invalid_at is None and spans:
                fact = _start_when_learned(fact, batch.timeless_open(plan, head.relation), learned, position)
            same = _same_value_at_start(spans, fact, position)
            if same is not None:
                _resolve_to(plan, same, fact, repeat if fact.invalid_at is None else 0)
                continue
        index = _insert(plan, fact, position)
        if fact.invalid_at is not None:
            ended_lines[(head.value, fact.valid_at, fact.invalid_at)] = index
        if head.single_valued:
            batch.add(index, head, timeless=facts[position - 1].valid_at is None)
            if _place(plan, index, spans, batch) and plan.inserts[index].invalid_at is None:
                replacing.add(index)
        if plan.inserts[index].invalid_at is None:
            batch.live_values[head.value] = index
    return plan


class _Span(NamedTuple):
    """A fact of a single-valued relation's history, as the batch has left it so far."""

    ref: Ref
    start: datetime | None
    end: datetime | None
    same: bool
    """It holds the value of the input being placed."""
    ended_before: bool
    """A stored fact that had ended before this write."""


@dataclass
class _Batch:
    """What the inputs placed so far did: the stored facts they end (at the new end), the inserts
    of each single-valued relation (open or ended) with their value groups, the open insert
    holding each value, and the inserts of single-valued relations that came without a start."""

    stored_ends: dict[int, datetime] = field(default_factory=dict)
    relation_inserts: dict[int, list[int]] = field(default_factory=dict)
    values: dict[int, int] = field(default_factory=dict)
    live_values: dict[int, int] = field(default_factory=dict)
    timeless: set[int] = field(default_factory=set)

    def end_of(self, row: Met) -> datetime | None:
        return self.stored_ends.get(row.id, row.invalid_at) if row.id is not None else None

    def spans(self, plan: Plan, stored: Sequence[Met], head: Met) -> list[_Span]:
        """The relation's history (its stored facts, and the batch's inserts of it so far)."""
        spans = [
            _Span(old(row.id), row.valid_at, self.end_of(row), bool(row.same), row.invalid_at is not None)
            for row in stored
            if row.id is not None
        ]
        for index in self.relation_inserts.get(head.relation, []):
            fact = plan.inserts[index]
            spans.append(_Span(new(index), fact.valid_at, fact.invalid_at, self.values[index] == head.value, False))
        return spans

    def timeless_open(self, plan: Plan, relation: int) -> bool:
        return any(
            index in self.timeless and plan.inserts[index].invalid_at is None
            for index in self.relation_inserts.get(relation, [])
        )

    def add(self, index: int, head: Met, *, timeless: bool) -> None:
        self.relation_inserts.setdefault(head.relation, []).append(index)
        self.values[index] = head.value
        if timeless:
            self.timeless.add(index)


def _start_over_free_time(fact: ValidFact, live: Ref, live_start: datetime | None, spans: Sequence[_Span]) -> ValidFact:
    """An equal write moves the live fact `live`'s start (`live_start`) earlier over time no other
    fact of the relation holds: at most to the latest end of those that began before it. An ended
    run of the same value counts: moved over it, the value would hold twice at once."""
    begins = _key(live_start)
    taken = [min(span.end or begins, begins) for span in spans if span.ref != live and _key(span.start) < begins]
    floor = max(taken, default=None)
    if floor is None or _key(fact.valid_at) >= floor:
        return fact
    return dataclasses.replace(fact, valid_at=floor)


def _fold_into_insert(plan: Plan, index: int, fact: ValidFact, repeat: int, replacing: set[int]) -> None:
    """An open input equal to the batch's open insert `index`: folded into it."""
    kept = plan.inserts[index]
    plan.inserts[index] = dataclasses.replace(
        kept,
        confidence=max(kept.confidence, fact.confidence),
        valid_at=kept.valid_at if index in replacing else earliest(kept.valid_at, fact.valid_at),
        source_quote=kept.source_quote if kept.source_quote is not None else fact.source_quote,
    )
    if repeat:
        plan.seen[index] += repeat
    else:  # an import: the count of the line that says more
        plan.seen[index] = max(plan.seen[index], fact.times_seen)


def _learned_start(fact: ValidFact, learned: datetime) -> ValidFact:
    if not fact.starts_when_learned or fact.valid_at is not None:
        return fact
    if fact.invalid_at is not None and fact.invalid_at <= learned:
        raise IntervalError(
            f"{fact.subject} {fact.predicate} {fact.object} would start now ({learned.isoformat()}) but ends "
            f"at {fact.invalid_at.isoformat()}; give it a valid_at before its invalid_at"
        )
    return dataclasses.replace(fact, valid_at=learned)


def _start_when_learned(fact: ValidFact, timeless_open: bool, learned: datetime, position: int) -> ValidFact:
    """A new value without a start of a relation that has a history starts at `learned` (there is
    no earlier place for it that no other value holds); two such values of one relation in the
    batch have no order (input `position`, 1-based, is the second)."""
    if timeless_open:
        raise UnorderedValueError(
            f"{fact.subject} {fact.predicate} holds one value at a time and this write gives it two values "
            "without valid_at; give them valid_at, or write them one after the other",
            position=position - 1,
        )
    return dataclasses.replace(fact, valid_at=learned)


def _insert(plan: Plan, fact: ValidFact, position: int) -> int:
    plan.inserts.append(fact)
    plan.sources.append(position - 1)
    plan.seen.append(fact.times_seen)
    plan.resolved.append(new(len(plan.inserts) - 1))
    return len(plan.inserts) - 1


def _holds(span: _Span, at: datetime | None) -> bool:
    """`span` holds at `at` and began before it."""
    return _key(span.start) < _key(at) and (span.end is None or _key(at) < span.end)


def _same_value_at_start(spans: Sequence[_Span], fact: ValidFact, position: int) -> _Span | None:
    """The fact of the history that already says what `fact` (input `position`, 1-based) says from
    its start: one of its value that starts with it, or (for an open input) holds at its start.
    Another value starting with it cannot be ordered: `UnorderedValueError`."""
    for span in spans:
        if _key(span.start) != _key(fact.valid_at):
            continue
        if span.same:
            return span
        start = "an unknown start" if fact.valid_at is None else fact.valid_at.isoformat()
        raise UnorderedValueError(
            f"{fact.subject} {fact.predicate} holds one value at a time and already has another "
            f"starting at {start}; give the new value another valid_at",
            position=position - 1,
        )
    if fact.invalid_at is None:
        return next((span for span in spans if span.same and _holds(span, fact.valid_at)), None)
    return None


def _resolve_to(plan: Plan, span: _Span, fact: ValidFact, repeat: int) -> None:
    if span.ref.kind == "old":
        _merge_into(plan, span.ref.number, fact, repeat)
    else:
        index = span.ref.number
        kept = plan.inserts[index]
        plan.inserts[index] = dataclasses.replace(kept, confidence=max(kept.confidence, fact.confidence))
        plan.seen[index] += repeat
    plan.resolved.append(span.ref)


def _place(plan: Plan, index: int, spans: Sequence[_Span], batch: _Batch) -> bool:
    """Put the new value `index` of a single-valued relation into its history `spans`: it ends
    where the next value starts (if before its own end), and the value holding at its start ends
    there, superseded by it. True when it ended one."""
    fact = plan.inserts[index]
    later = sorted(
        (span.start, span.ref) for span in spans if span.start is not None and _key(span.start) > _key(fact.valid_at)
    )
    if later and (fact.invalid_at is None or later[0][0] < fact.invalid_at):
        end, successor = later[0]
        _end(plan, batch, new(index), end, successor)
    holders = [span for span in spans if _holds(span, fact.valid_at)]
    for span in holders:
        assert fact.valid_at is not None  # nothing holds before the earliest start
        _end(plan, batch, span.ref, fact.valid_at, new(index), ended_before=span.ended_before)
    return bool(holders)


def _end(plan: Plan, batch: _Batch, ref: Ref, at: datetime, by: Ref | None, *, ended_before: bool = False) -> None:
    """End `ref` at `at`, superseded by `by`: one `End` per fact, the last one decided."""
    plan.ends[:] = [end for end in plan.ends if end.fact != ref]
    plan.ends.append(End(ref, at, by, ended_before))
    if ref.kind == "old":
        batch.stored_ends[ref.number] = at
        return
    plan.inserts[ref.number] = dataclasses.replace(plan.inserts[ref.number], invalid_at=at)
    for value, holder in list(batch.live_values.items()):
        if holder == ref.number:
            del batch.live_values[value]
