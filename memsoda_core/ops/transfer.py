"""JSON lines out and in: export a scope, parse and import a file (operations). A file holds fact
lines, then episode lines, then item lines (`items.transfer`, each after its fact's line); an
import writes them all in one transaction, after every line is checked."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsoda_core import limits
from memsoda_core.checks import check_int, display
from memsoda_core.errors import (
    ImportFormatError,
    UnorderedValueError,
    ValidationError,
)
from memsoda_core.items import transfer as items_transfer
from memsoda_core.items.transfer import ImportedItem
from memsoda_core.models import ImportReport
from memsoda_core.ops.editing import write_episodes
from memsoda_core.ops.maintenance import ensure_tenant_indexes, set_aside_fact_index
from memsoda_core.runner.steps import Operation, emit, execute, execute_as, progress
from memsoda_core.store import statements as sql_store
from memsoda_core.store.fact_columns import EXPORTED_FIELDS
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
    ValidEpisode,
    ValidFact,
    load_json,
    validate_episode,
    validate_facts,
)
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.counts import CountDeltas, bump_counts
from memsoda_core.writing.operation import lock_facts, write_facts

_EXPORT_PAGE = 1000


def fact_record(row: sql_store.ExportedFact) -> dict[str, Any]:
    """An exported line: the fact's exported columns (`fact_columns.EXPORTED_FIELDS`), and
    `"item_owned": true` last for a fact items wrote alone (absent: the application's), ready for
    `import_jsonl`."""
    values = {name: getattr(row.fact, name) for name in EXPORTED_FIELDS if name != "subject_type"}
    values["subject_type"] = row.subject_type
    record = {"kind": "fact", **{name: _json_value(values[name]) for name in EXPORTED_FIELDS}}
    if row.item_owned:
        record["item_owned"] = True
    return record


def _json_value(value: Any) -> Any:
    """A field's value in JSON: a time in ISO 8601, a tuple as a list."""
    if isinstance(value, datetime):
        return value.isoformat()
    return list(value) if isinstance(value, tuple) else value


_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def jsonl_line(record: Mapping[str, Any]) -> str:
    """One JSON line, readable (non-ASCII kept) but with the characters that some line splitters
    (`str.splitlines`) treat as line breaks escaped, so every record stays on one line."""
    text = json.dumps(record, ensure_ascii=False)
    for char, escaped in _LINE_BREAKS.items():
        text = text.replace(char, escaped)
    return text + "\n"


def episode_record(row: sql_store.EpisodeRow) -> dict[str, Any]:
    """An exported line of an episode, ready for `import_jsonl`."""
    return {
        "kind": "episode",
        "id": int(row.id),
        "thread_id": row.thread_id,
        "text": row.text,
        "created_at": row.created_at.isoformat(),
    }


def export_jsonl(info: StoreInfo, scope: Scope) -> Operation[int]:
    """Emit every fact, then every episode, then every item of the scope as JSON lines (one `Emit`
    per page), read in one snapshot (`Memory.export_jsonl` runs it with `snapshot=True`: the fact
    pages hold every item's fact); returns the lines emitted."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    written = 0
    after = 0
    while True:
        rows = yield from execute_as(
            sql_store.ExportedFact,
            sql_store.export_facts(info.schema),
            {**base, "after": after, "limit": _EXPORT_PAGE},
        )
        if rows:
            yield from emit([jsonl_line(fact_record(row)) for row in rows])
        written += len(rows)
        if len(rows) < _EXPORT_PAGE:
            break
        after = rows[-1].fact.id
    episodes = yield from execute_as(sql_store.EpisodeRow, sql_store.export_episodes(info.schema), base)
    if episodes:
        yield from emit([jsonl_line(episode_record(row)) for row in episodes])
    items = yield from items_transfer.export_items(info, scope, jsonl_line)
    return written + len(episodes) + items


_FACT_RECORD_IGNORED = {"kind", "id", "times_seen", "item_owned"}


@dataclass(frozen=True, kw_only=True)
class ImportedEpisode(ValidEpisode):
    """An episode line of an import. `dated`: the line gave its time; one without was stamped with
    the import's, so it is the same episode as a stored one of its thread and text at any time."""

    dated: bool = True

    @property
    def key(self) -> tuple[str | None, str, datetime | None]:
        """What makes two episode lines the same episode."""
        return self.thread_id, self.text, self.created_at if self.dated else None


def distinct_episodes(episodes: Iterable[ImportedEpisode]) -> list[ImportedEpisode]:
    """The first of each set of equal lines (`ImportedEpisode.key`), in file order: a line repeated
    in the file is one episode, as equal fact lines are one fact."""
    first: dict[tuple[str | None, str, datetime | None], ImportedEpisode] = {}
    for episode in episodes:
        first.setdefault(episode.key, episode)
    return list(first.values())


@dataclass(frozen=True, kw_only=True)
class ImportCounts:
    """What an import wrote: fact lines that became new facts, and those that resolved to a stored
    fact or an equal line (`writing.decisions`); episode lines written, and those already stored;
    the lines skipped (`on_error="skip"`) as the write rules could not place them (fact lines) or
    their fact's line was skipped (item lines), as (line number, message)."""

    facts_new: int
    facts_merged: int
    episodes_new: int
    episodes_present: int
    facts_skipped: tuple[tuple[int, str], ...] = ()
    items_skipped: tuple[tuple[int, str], ...] = ()


def _item_owned(record: Mapping[str, Any], line: int) -> bool:
    """An exported line's `item_owned` (absent: false, the application's fact), restored on import."""
    value = record.get("item_owned", False)
    if not isinstance(value, bool):
        raise ImportFormatError(f"item_owned must be true or false, got {display(value)}", line=line)
    return value


def _times_seen(record: Mapping[str, Any], line: int) -> int:
    """An exported line's `times_seen` (absent: 1), restored on import."""
    value = record.get("times_seen", 1)
    try:
        return check_int(value, "times_seen", low=1, high=limits.MAX_TIMES_SEEN)
    except ValidationError as exc:
        raise ImportFormatError(str(exc), line=line) from None


@dataclass(frozen=True, kw_only=True)
class ParsedImport:
    """A validated JSONL file, ready to write: its facts (with each line's number, `fact_numbers`),
    episodes and items (each referring to its fact by the fact's index, `ImportedItem.fact_ref`),
    and the (line number, message) of each line skipped."""

    facts: list[ValidFact]
    episodes: list[ImportedEpisode]
    errors: list[tuple[int, str]]
    items: list[ImportedItem] = dataclasses.field(default_factory=list)
    fact_numbers: list[int] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.facts) + len(self.episodes) + len(self.items)

    def report(self, counts: ImportCounts) -> ImportReport:
        """The report of the import of these lines, with the lines its write skipped too."""
        errors = sorted([*self.errors, *counts.facts_skipped, *counts.items_skipped])
        return ImportReport(
            facts=len(self.facts) - len(counts.facts_skipped),
            episodes=len(self.episodes),
            skipped=len(errors),
            errors=tuple(errors),
            facts_new=counts.facts_new,
            facts_merged=counts.facts_merged,
            episodes_new=counts.episodes_new,
            episodes_present=counts.episodes_present,
            items=len(self.items) - len(counts.items_skipped),
        )


def parse_jsonl(lines: Iterable[str], *, now: datetime, on_error: str) -> ParsedImport:
    """Validate every line first. `on_error="raise"` raises ImportFormatError at the first bad
    line (nothing is written); `"skip"` collects (line number, message) and goes on."""
    facts: list[ValidFact] = []
    fact_numbers: list[int] = []
    fact_lines: dict[int, list[int]] = {}  # exported id -> indexes of the fact lines carrying it, so far
    episodes: list[ImportedEpisode] = []
    items: list[ImportedItem] = []
    errors: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            try:
                record = load_json(line)
            except ValidationError as exc:
                raise ImportFormatError(str(exc), line=number) from None
            if not isinstance(record, dict):
                raise ImportFormatError("each line must be a JSON object", line=number)
            kind = record.get("kind", "fact")
            body = {k: v for k, v in record.items() if k not in _FACT_RECORD_IGNORED}
            try:
                if kind not in ("fact", "episode", "item"):
                    raise ImportFormatError(
                        f"unknown kind {display(kind)}; use 'fact', 'episode' or 'item'", line=number
                    )
                if kind == "item":
                    items.append(items_transfer.parse_item(record, number=number, fact_lines=fact_lines, now=now))
                elif kind == "fact":
                    seen, owned = _times_seen(record, number), _item_owned(record, number)
                    (fact,) = validate_facts([body])
                    facts.append(dataclasses.replace(fact, times_seen=seen, item_owned=owned))
                    fact_numbers.append(number)
                    ref = items_transfer.jsonl_fact_id(record)
                    if ref is not None:
                        fact_lines.setdefault(ref, []).append(len(facts) - 1)
                else:
                    episode = validate_episode(body, now=now)
                    dated = body.get("created_at") is not None
                    episodes.append(ImportedEpisode(**dataclasses.asdict(episode), dated=dated))
            except ImportFormatError:
                raise
            except ValidationError as exc:
                raise ImportFormatError(str(exc).removeprefix("fact #1: "), line=number) from None
            except RecursionError:  # a value nested deeper than the checks can walk
                raise ImportFormatError("a value is nested too deeply", line=number) from None
        except ImportFormatError as exc:
            if on_error == "raise":
                raise
            errors.append((number, str(exc)))
    return ParsedImport(facts=facts, episodes=episodes, errors=errors, items=items, fact_numbers=fact_numbers)


def import_records(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    episodes: Sequence[ImportedEpisode],
    *,
    batch_size: int,
    rebuild_index: bool | None = None,
    items: Sequence[ImportedItem] = (),
    now: datetime | None = None,
    fact_numbers: Sequence[int] = (),
    on_error: str = "raise",
) -> Operation[ImportCounts]:
    """Write validated records in batches inside one transaction, reconciled as any write is
    (`writing.decisions`; re-importing an export adds nothing): all or nothing, the counts bumped
    once after the rows, a `Progress` after each batch. An episode the scope holds already is
    not written again (`store.statements.stored_episodes`). Items go last, each referring to the
    fact its fact's line resolved to (`ImportedItem.fact_ref`: that line's index in `facts`;
    `items.transfer.import_items`, ending at `now` the facts of items' own that replaced items leave;
    a fact of an item_owned line that no item refers to then is the application's,
    `items.transfer.disown_unreferenced`).
    An import into a scope with its own fact HNSW may rebuild it after the rows
    (`set_aside_fact_index`).

    A fact line the write rules cannot place in its relation's history (a single-valued value
    starting with another: `UnorderedValueError`) raises `ImportFormatError` naming its line
    (`fact_numbers`: each fact's line number), or with `on_error="skip"` is left out, with the item
    lines referring to it, and reported (`ImportCounts`)."""
    if facts:
        yield from set_aside_fact_index(info, scope, len(facts), rebuild_index)
    deltas = CountDeltas()
    item_lines = len(items)
    # the keys of every item line: a superset of those written when lines are left out
    replaced = (
        (yield from items_transfer.replaced_values(info, scope, items_transfer.distinct_items(items))) if items else []
    )
    if facts or items:
        # The locks of every fact of the import and of its relations, and of the facts the items it
        # replaces refer to, taken before its first row (and bounded in number,
        # `writing.reconcile_statements.LOCK_BUCKETS`): taken per batch, a batch's could wait for a
        # writer that waits for the import's new entities, a cycle; and no relation declared
        # single-valued meanwhile is read without its lock (`writing.operation.reconcile`).
        learned = (yield from lock_facts(info, scope, facts, replaced, relations=True)).learned_at
    numbers = list(fact_numbers) or list(range(1, len(facts) + 1))
    resolved: dict[int, int] = {}  # fact index -> the fact its line resolved to
    unplaced: list[tuple[int, str]] = []  # (fact index, message) of the lines left out
    for start in range(0, len(facts), batch_size):
        indexes = list(range(start, min(start + batch_size, len(facts))))
        placed = _PlacedBatch(indexes, numbers, skip=on_error == "skip")
        resolved.update((yield from placed.write(info, scope, facts, learned, deltas)))
        unplaced += placed.unplaced
        yield from progress(len(indexes))
    yield from bump_counts(info, scope, deltas)  # once, at the end: see `CountDeltas`
    episodes_new = yield from _import_episodes(info, scope, episodes, batch_size)
    items_skipped: list[tuple[int, str]] = []
    if items:
        left_out = {index: numbers[index] for index, _ in unplaced}
        kept, items_skipped = _items_of_placed_facts(items, left_out)
        when = learned if now is None else now
        yield from items_transfer.import_items(
            info, scope, items_transfer.distinct_items(kept), resolved, locked=replaced, now=when, learned=learned
        )
        yield from progress(item_lines)
    owned = [fact_id for index, fact_id in resolved.items() if facts[index].item_owned]
    if owned:  # items' own facts stay live only while an item refers to them: not those no item line took
        yield from items_transfer.disown_unreferenced(info, scope, owned)
    if facts or episodes or items:
        # Built once, after the rows: much faster than maintaining HNSW row by row. (Statistics are
        # refreshed by `write_facts` whenever the table has doubled, as for any write.)
        yield from ensure_tenant_indexes(info, scope)
    return ImportCounts(
        facts_new=deltas.facts,
        facts_merged=len(resolved) - deltas.facts,
        episodes_new=episodes_new,
        episodes_present=len(episodes) - episodes_new,
        facts_skipped=tuple((numbers[index], message) for index, message in unplaced),
        items_skipped=tuple(items_skipped),
    )


def _items_of_placed_facts(
    items: Sequence[ImportedItem], left_out: Mapping[int, int]
) -> tuple[list[ImportedItem], list[tuple[int, str]]]:
    """The item lines whose fact's line was written, and (line number, message) of those whose
    fact's line was left out (`left_out`: its index -> its line number)."""
    kept: list[ImportedItem] = []
    skipped: list[tuple[int, str]] = []
    for each in items:
        if each.fact_ref is not None and each.fact_ref in left_out:
            error = ImportFormatError(f"its fact's line {left_out[each.fact_ref]} was skipped", line=each.line)
            skipped.append((each.line, str(error)))
        else:
            kept.append(each)
    return kept, skipped


@dataclass
class _PlacedBatch:
    """One batch of an import's facts (`indexes` into them; `numbers`: each fact's line number).
    A line the write rules cannot place (`UnorderedValueError`, raised by the plan before the batch
    writes anything) raises `ImportFormatError` naming it, or with `skip` is left out (`unplaced`:
    its index and message) and the rest planned again in the same transaction."""

    indexes: list[int]
    numbers: Sequence[int]
    skip: bool
    unplaced: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    def write(
        self, info: StoreInfo, scope: Scope, facts: Sequence[ValidFact], learned: datetime, deltas: CountDeltas
    ) -> Operation[dict[int, int]]:
        """Write the batch; the fact each line written resolved to, by index."""
        while True:
            try:
                ids = yield from _import_batch(info, scope, [facts[i] for i in self.indexes], learned, deltas)
                return dict(zip(self.indexes, ids, strict=True))
            except UnorderedValueError as exc:
                index = self.indexes.pop(exc.position)
                line = self.numbers[index]
                if not self.skip:
                    raise ImportFormatError(
                        f"cannot be placed: {exc}; on_error='skip' leaves this line out and imports the rest",
                        line=line,
                    ) from exc
                self.unplaced.append((index, str(ImportFormatError(f"cannot be placed: {exc}", line=line))))


def _import_batch(
    info: StoreInfo, scope: Scope, batch: Sequence[ValidFact], learned: datetime, deltas: CountDeltas
) -> Operation[list[int]]:
    """Write one batch of an import's facts; the fact each line resolved to. A batch with lines
    items own (`ValidFact.item_owned`) is written as items' (its new facts items' own, the stored
    ones it meets left as they are); then the facts its other lines resolved to are no longer
    items' own, as after any other write."""
    owned = any(fact.item_owned for fact in batch)
    ids = yield from write_facts(
        info, scope, batch, None, standalone=False, learned=learned, counts=deltas, item_owned=owned
    )
    shared = sorted({fact_id for fact_id, fact in zip(ids, batch, strict=True) if not fact.item_owned})
    if owned and shared:
        base = {"dataset": scope.dataset, "project": scope.project}
        yield from execute(sql_write.clear_item_owned(info.schema), {**base, "ids": shared})
    return ids


def _import_episodes(
    info: StoreInfo, scope: Scope, episodes: Sequence[ImportedEpisode], batch_size: int
) -> Operation[int]:
    """Write the episodes of an import that the scope does not hold yet, once each (what it holds
    is read before any is written, so the outcome does not depend on `batch_size`); returns how
    many were written."""
    if not episodes:
        return 0
    base = {"dataset": scope.dataset, "project": scope.project}
    yield from execute(sql_write.lock_imported_episodes(), {**base, "schema": info.schema})
    distinct = distinct_episodes(episodes)
    new: list[ImportedEpisode] = []
    for start in range(0, len(distinct), batch_size):
        chunk = distinct[start : start + batch_size]
        stored = yield from execute_as(
            sql_write.StoredEpisode,
            sql_write.stored_episodes(info.schema),
            {
                **base,
                "thread_ids": [e.thread_id for e in chunk],
                "texts": [e.text for e in chunk],
                "created_ats": [e.created_at for e in chunk],
                "dated": [e.dated for e in chunk],
            },
        )
        held = {row.position for row in stored}
        new.extend(episode for position, episode in enumerate(chunk, start=1) if position not in held)
    for start in range(0, len(new), batch_size):
        chunk = new[start : start + batch_size]
        yield from write_episodes(info, scope, chunk)
        yield from progress(len(chunk))
    if len(new) < len(episodes):
        yield from progress(len(episodes) - len(new))  # the lines already stored
    return len(new)
