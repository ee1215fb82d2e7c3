"""What a batch of facts does to the facts its relations already hold (pure): which inputs are
stored, which resolve to an equal fact, which live facts a new value ends.

The rules, for every path that writes facts (`add_facts`, `supersede`, `import_jsonl`):
- An open input (no `invalid_at`) equal to a live fact (same subject, predicate and object, case
  folded) stores nothing and resolves to that fact (the oldest, if the store holds several). The
  fact keeps the higher confidence, the earlier start and its quote (the new one if it had none),
  and counts the repetition (`times_seen`; an import restores and does not count).
- An ended input (an exported history line) equal to a fact with the same interval resolves to it.
- An open input of a single-valued relation with a new value ends the live one at its start
  (`superseded_by` the new fact). A new value that starts before the live one is history: it is
  stored ended where the live one starts. Two values starting at the same instant cannot be
  ordered: `IntervalError`.
- Inside one batch, the same rules hold between earlier and later inputs.

Time. A fact with no start (`valid_at` None) is true for as long as memory knows: it is the
earliest start, so an equal write without one makes the stored fact's start unknown too. A new
value without a start that ends a live one starts when memory learns it (`learned`, the write's
time after its locks), and the old value ends then: no `as_of` sees both. Two values without a
start of one single-valued relation in one batch cannot be ordered: `IntervalError`. A fact
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
    ended: set[int] = set()  # stored facts this batch ends
    live_values: dict[int, int] = {}  # value group -> open insert holding it
    live_relations: dict[int, list[int]] = {}  # relation group -> open inserts
    ended_lines: dict[tuple[int, datetime | None, datetime], int] = {}  # an ended insert per value and interval
    timeless: set[int] = set()  # open inserts of single-valued relations that came without a start
    replacing: set[int] = set()  # inserts that end another: their start is that one's end, kept
    for position, fact in enumerate(facts, start=1):
        group = rows[position]
        head = group[0]
        stored = [row for row in group if row.id is not None]
        if fact.invalid_at is not None:
            line = (head.value, fact.valid_at, fact.invalid_at)
            equal = next((row.id for row in stored if row.same), None)
            if equal is not None:
                _merge_into(plan, equal, fact, 0)
                plan.resolved.append(old(equal))
            elif line in ended_lines:
                plan.resolved.append(new(ended_lines[line]))
            else:
                ended_lines[line] = _insert(plan, fact, position)
            continue
        equal = next((row.id for row in stored if row.same and row.id not in ended), None)
        if equal is not None:
            _merge_into(plan, equal, fact, repeat)
            plan.resolved.append(old(equal))
            continue
        if head.value in live_values:
            index = live_values[head.value]
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
            plan.resolved.append(new(index))
            continue
        index = _insert(plan, fact, position)
        if head.single_valued:
            others: list[tuple[Ref, datetime | None]] = [
                (old(row.id), row.valid_at)
                for row in stored
                if row.id is not None and not row.same and row.id not in ended
            ]
            batch = live_relations.get(head.relation, [])
            others += [(new(other), plan.inserts[other].valid_at) for other in batch]
            if fact.valid_at is None:
                timeless.add(index)
                if others:
                    _start_when_learned(plan, index, batch, timeless, learned)
            if not _replace(plan, index, others, ended, live_values, live_relations):
                continue
            if others:
                replacing.add(index)
        live_values[head.value] = index
        live_relations.setdefault(head.relation, []).append(index)
    return plan


def _learned_start(fact: ValidFact, learned: datetime) -> ValidFact:
    if not fact.starts_when_learned or fact.valid_at is not None:
        return fact
    if fact.invalid_at is not None and fact.invalid_at <= learned:
        raise IntervalError(
            f"{fact.subject} {fact.predicate} {fact.object} would start now ({learned.isoformat()}) but ends "
            f"at {fact.invalid_at.isoformat()}; give it a valid_at before its invalid_at"
        )
    return dataclasses.replace(fact, valid_at=learned)


def _start_when_learned(plan: Plan, index: int, batch: list[int], timeless: set[int], learned: datetime) -> None:
    """A new value without a start that meets a live one starts at `learned`; two such values of
    one relation in the batch have no order."""
    fact = plan.inserts[index]
    if any(other in timeless for other in batch):
        raise IntervalError(
            f"{fact.subject} {fact.predicate} holds one value at a time and this write gives it two values "
            "without valid_at; give them valid_at, or write them one after the other"
        )
    plan.inserts[index] = dataclasses.replace(fact, valid_at=learned)


def _insert(plan: Plan, fact: ValidFact, position: int) -> int:
    plan.inserts.append(fact)
    plan.sources.append(position - 1)
    plan.seen.append(fact.times_seen)
    plan.resolved.append(new(len(plan.inserts) - 1))
    return len(plan.inserts) - 1


def _replace(
    plan: Plan,
    index: int,
    others: list[tuple[Ref, datetime | None]],
    ended: set[int],
    live_values: dict[int, int],
    live_relations: dict[int, list[int]],
) -> bool:
    """The new value `index` of a single-valued relation against its live `others`: it ends them
    (True: it is live), or it is history, ended where the earliest later one starts (False)."""
    fact = plan.inserts[index]
    if not others:
        return True
    begins = fact.valid_at
    assert begins is not None  # a new value without a start that meets others starts when learned
    later = sorted((start, ref) for ref, start in others if start is not None and start > begins)
    if later:
        end, successor = later[0]
        plan.inserts[index] = dataclasses.replace(fact, invalid_at=end)
        plan.ends.append(End(new(index), end, successor))
        return False
    for _ref, other in others:
        if other == begins:
            raise IntervalError(
                f"{fact.subject} {fact.predicate} holds one value at a time and already has another "
                f"starting at {begins.isoformat()}; give the new value a later valid_at"
            )
    for ref, _start in others:
        plan.ends.append(End(ref, begins, new(index)))
        number = ref.number
        if ref.kind == "old":
            ended.add(number)
            continue
        plan.inserts[number] = dataclasses.replace(plan.inserts[number], invalid_at=begins)
        for groups in live_relations.values():
            if number in groups:
                groups.remove(number)
        for value, holder in list(live_values.items()):
            if holder == number:
                del live_values[value]
    return True
