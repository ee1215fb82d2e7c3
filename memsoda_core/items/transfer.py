"""Items in an export and an import (`ops.transfer`): their JSON lines, the check of a line, and
their write into the importing scope.

An item line follows the fact lines (its fact's line above it)::

    {"kind": "item", "namespace": ["notes"], "key": "k", "value": {...}, "fact_id": 12,
     "ttl_minutes": null, "expires_at": null, "created_at": "...", "updated_at": "..."}

`fact_id` is the exported `id` of the line of the item's fact (null: the item has no text): an
import resolves it, as it reads the line, to the one fact line above it with that id, and the item
refers to the fact that line resolved to (a line further down with the same id does not count).
An imported item replaces an item the scope holds under its (namespace, key), as a put does, and
the fact of items' own that the replaced one leaves unreferenced ends (`items.links.end_orphans`):
items' own facts stay live exactly while an item refers to them. A fact line marked item_owned
whose item line the import did not write (skipped, missing, or replaced by a later line of its key)
leaves a live fact no item refers to: it becomes the application's (`disown_unreferenced`), kept
rather than ended, as the file gave it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memsoda_core.checks import display, is_int
from memsoda_core.errors import ImportFormatError, ValidationError
from memsoda_core.items import statements as sql_items
from memsoda_core.items.links import batch_json, end_orphans
from memsoda_core.items.values import ValidItem, check_key, check_namespace, check_ttl, check_value, value_json
from memsoda_core.runner.steps import Operation, emit, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, parse_time
from memsoda_core.writing import inserts
from memsoda_core.writing.insert_rows import insert_rows
from memsoda_core.writing.operation import lock_facts

_EXPORT_PAGE = 1000
_FIELDS = frozenset(
    {"kind", "namespace", "key", "value", "fact_id", "ttl_minutes", "expires_at", "created_at", "updated_at"}
)

ITEMS_IMPORTED = dataclasses.replace(
    inserts.ITEMS,
    columns=(
        *(column for column in inserts.ITEMS.columns if column.name in ("namespace", "key", "value", "fact_id")),
        inserts.each("created_at", "created_ats", "timestamptz"),
        inserts.each("updated_at", "updated_ats", "timestamptz"),
        inserts.each("ttl_minutes", "ttl_minutes", "float8"),
        inserts.each("expires_at", "expires_ats", "timestamptz"),
    ),
    tail=inserts.UPSERT_SET + ", created_at = EXCLUDED.created_at",
)
"""Store imported items with their own times and expiry, replacing the scope's at their keys."""


@dataclass(frozen=True, kw_only=True)
class ImportedItem:
    """An item line of an import: the item (`ValidItem`, its fact unset), the index of its fact's
    line among the import's fact lines (`fact_ref`; None: no text), its times and expiry, and its
    line number."""

    item: ValidItem
    fact_ref: int | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    line: int


def item_record(row: sql_items.ExportedItem) -> dict[str, Any]:
    """An exported item line, ready for `parse_item`."""
    return {
        "kind": "item",
        "namespace": row.namespace,
        "key": row.key,
        "value": row.value,
        "fact_id": row.fact_id,
        "ttl_minutes": row.ttl_minutes,
        "expires_at": None if row.expires_at is None else row.expires_at.isoformat(),
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def export_items(info: StoreInfo, scope: Scope, line: Callable[[Mapping[str, Any]], str]) -> Operation[int]:
    """Emit the scope's items as lines (`line` renders a record), one `Emit` per page; how many
    lines. Read in the export's one snapshot, after its fact pages, which hold every item's fact."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project, "limit": _EXPORT_PAGE}
    after: dict[str, Any] = {"after_namespace": None, "after_key": None}
    written = 0
    while True:
        rows = yield from execute_as(sql_items.ExportedItem, sql_items.export_items(info.schema), {**base, **after})
        if rows:
            yield from emit([line(item_record(row)) for row in rows])
        written += len(rows)
        if len(rows) < _EXPORT_PAGE:
            return written
        after = {"after_namespace": rows[-1].namespace, "after_key": rows[-1].key}


def parse_item(
    record: Mapping[str, Any], *, number: int, fact_lines: Mapping[int, Sequence[int]], now: datetime
) -> ImportedItem:
    """An item line checked (`ImportFormatError` saying what is wrong). `fact_lines`: the indexes of
    the fact lines above it carrying each exported id; its `fact_id` must name exactly one line,
    whose index becomes its `fact_ref`."""
    unknown = sorted(set(record) - _FIELDS)
    if unknown or "namespace" not in record or "key" not in record or "value" not in record:
        raise ImportFormatError(
            f"an item line needs namespace, key and value (and may have fact_id, ttl_minutes, expires_at,"
            f" created_at, updated_at); got {sorted(record)}",
            line=number,
        )
    try:
        value = check_value(record["value"])
        if value is None:
            raise ValidationError("an item line's value must be an object (an export holds no deletes)")
        item = ValidItem(
            namespace=check_namespace(record["namespace"]),
            key=check_key(record["key"]),
            value_json=value_json(value),
            fact=None,
            ttl_minutes=check_ttl(record.get("ttl_minutes")),
        )
        created = parse_time(record.get("created_at"), "created_at") or now
        updated = parse_time(record.get("updated_at"), "updated_at") or created
        expires = _expires_at(record, item.ttl_minutes, updated)
    except ValidationError as exc:
        raise ImportFormatError(str(exc), line=number) from None
    return ImportedItem(
        item=item,
        fact_ref=_fact_ref(record.get("fact_id"), fact_lines, number),
        created_at=created,
        updated_at=updated,
        expires_at=expires,
        line=number,
    )


def _expires_at(record: Mapping[str, Any], ttl_minutes: float | None, updated: datetime) -> datetime | None:
    """The line's expiry: as given, else `ttl_minutes` after its last update; none without a TTL."""
    given = parse_time(record.get("expires_at"), "expires_at")
    if ttl_minutes is None:
        if given is not None:
            raise ValidationError("expires_at needs ttl_minutes (an item expires only with a TTL)")
        return None
    if given is not None:
        return given
    try:
        return updated + timedelta(minutes=ttl_minutes)
    except OverflowError:  # past datetime.max, the year 9999
        raise ValidationError(
            f"updated_at {updated.isoformat()} plus ttl_minutes {ttl_minutes:g} is past the year 9999;"
            " give an earlier updated_at, a shorter TTL or an expires_at"
        ) from None


def _fact_ref(value: Any, fact_lines: Mapping[int, Sequence[int]], number: int) -> int | None:
    """The index of the one fact line above the item whose exported id is `value` (None: null)."""
    if value is None:
        return None
    if not is_int(value):
        raise ImportFormatError(f"fact_id must be the id of a fact line or null, got {display(value)}", line=number)
    lines = fact_lines.get(value, ())
    if len(lines) != 1:
        why = "no fact line above it has" if not lines else f"{len(lines)} fact lines above it have"
        raise ImportFormatError(f"the item refers to fact_id {value}, which {why}", line=number)
    return lines[0]


def distinct_items(items: Sequence[ImportedItem]) -> list[ImportedItem]:
    """The last line of each (namespace, key), in the order of those lines: as puts in file order."""
    last: dict[tuple[tuple[str, ...], str], ImportedItem] = {}
    for each in items:
        last.pop((each.item.namespace, each.item.key), None)
        last[(each.item.namespace, each.item.key)] = each
    return list(last.values())


def replaced_values(
    info: StoreInfo, scope: Scope, items: Sequence[ImportedItem]
) -> Operation[list[tuple[str, str, str]]]:
    """The value keys (subject, predicate, object) of the facts the scope's items at the import's
    keys refer to now: their relation locks are taken with the import's (`ops.transfer`)."""
    rows = yield from execute_as(sql_items.ItemFact, sql_items.item_facts(info.schema), _params(info, scope, items))
    return sorted({(r.subject, r.predicate, r.object) for r in rows if r.subject and r.predicate and r.object})


def import_items(
    info: StoreInfo,
    scope: Scope,
    items: Sequence[ImportedItem],
    fact_ids: Mapping[int, int],
    *,
    locked: Sequence[tuple[str, str, str]],
    now: datetime,
    learned: datetime,
) -> Operation[None]:
    """Store `items` (`distinct_items`), each referring to the fact its fact's line resolved to
    (`fact_ids`: by the line's index, `ImportedItem.fact_ref`), replacing the scope's at their
    keys; under each item's lock, after the relation locks of the facts the replaced items referred
    to (`locked`, taken with the import's), as a put orders them. Then the facts of items' own the
    replaced items leave end."""
    params = _params(info, scope, items)
    yield from execute(sql_items.lock_items(info.schema), params)
    held = yield from execute_as(sql_items.ItemFact, sql_items.item_facts(info.schema), params)
    moved = sorted(
        {(r.subject, r.predicate, r.object) for r in held if r.subject and r.predicate and r.object} - set(locked)
    )
    if moved:  # another writer changed an item since `replaced_values`: lock its fact's relation too
        yield from lock_facts(info, scope, [], moved)
    new_fact = {n: fact_ids[each.fact_ref] for n, each in enumerate(items) if each.fact_ref is not None}
    columns = {
        "namespaces": [list(each.item.namespace) for each in items],
        "keys": [each.item.key for each in items],
        "values": [each.item.value_json for each in items],
        "fact_ids": [new_fact.get(n) for n in range(len(items))],
        "created_ats": [each.created_at for each in items],
        "updated_ats": [each.updated_at for each in items],
        "ttl_minutes": [each.item.ttl_minutes for each in items],
        "expires_ats": [each.expires_at for each in items],
    }
    yield from insert_rows(info, ITEMS_IMPORTED, {"dataset": scope.dataset, "project": scope.project, **columns})
    yield from end_orphans(info, scope, [each.item for each in items], new_fact, held, now, learned)


def disown_unreferenced(info: StoreInfo, scope: Scope, fact_ids: Sequence[int]) -> Operation[None]:
    """After an import's items: which of `fact_ids` (the facts its item_owned lines resolved to)
    are items' own and live yet no item refers to, are the application's from now on."""
    params = {"dataset": scope.dataset, "project": scope.project, "ids": sorted(set(fact_ids))}
    yield from execute(sql_items.disown_unreferenced_facts(info.schema), params)


def _params(info: StoreInfo, scope: Scope, items: Sequence[ImportedItem]) -> dict[str, Any]:
    return {
        "dataset": scope.dataset,
        "project": scope.project,
        "schema": info.schema,
        "items": batch_json([each.item for each in items]),
    }


def jsonl_fact_id(record: Mapping[str, Any]) -> int | None:
    """A fact line's exported `id` (what item lines refer to), None when it has none usable."""
    value = record.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
