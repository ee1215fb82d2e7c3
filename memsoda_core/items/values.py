"""Items: key-addressed JSON documents beside the facts (the shape of LangGraph's store), and the
pure checks of what goes in: values, namespaces, filters and namespace patterns.

An item lives in a scope (dataset, project) under a namespace (a path of labels) and a key. An item
with text gets one fact, "user noted <text>" (a LITERAL object), written by the ordinary
reconciling write path, so recall finds items by meaning, entities and keywords, fused as for any
fact (`items.operations`). Equal texts in one scope are one fact, as equal facts always are, and an
item whose text equals a live fact the application wrote refers to that fact. A fact an item's put
created ends (superseded by its new text's fact) when no item refers to it any more; a fact the
application wrote (before or since) is the application's, and stays.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from memsoda_core import limits
from memsoda_core.checks import check_int, check_number, is_number
from memsoda_core.errors import ArgumentTypeError, InvalidTextError, LimitError, TextTooLongError, ValidationError
from memsoda_core.models import LITERAL
from memsoda_core.text import collapse_line
from memsoda_core.validation import ValidFact, check_batch_size, check_scope, check_text, validate_fact

ITEM_SUBJECT = "user"
"""The subject of every item's fact: the scope's user, the speaker of what the item holds."""
ITEM_PREDICATE = "noted"

MAX_ITEM_JSON_CHARS = 1_000_000
"""An item's value, as JSON text."""
MAX_LABEL_CHARS = 200
"""One namespace label."""
MAX_NAMESPACE_LABELS = 32
MAX_KEY_CHARS = 1_000
MAX_LIST_LIMIT = 10_000
"""`limit` + `offset` of an item search (with a query or without) or of a namespace listing."""
MAX_SEARCH_SCOPES = 50
"""Datasets one search by query may span (one recall each): more raise `LimitError`."""

Namespace = tuple[str, ...]
Comparison = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
COMPARISONS: frozenset[str] = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
IS_OBJECT: Literal["object"] = "object"
"""The test a nested mapping of a filter makes of its field: the value there is a JSON object
(LangGraph's `InMemoryStore` compares a nested mapping with a mapping only; `{"o": {}}` matches
every item whose `o` is one). Not an operator a filter can name."""


@dataclass(frozen=True, kw_only=True)
class ItemInput:
    """An item to store under (`namespace`, `key`) in a scope; `value` None deletes it. `text` is
    what recall should find it by (None: not searchable by query); it is made one line and cut to
    the fact object limit (`limits.MAX_OBJECT_CHARS`) at a word boundary. `ttl_minutes`: the item
    expires that long after this put (or after a read that refreshes it), and a sweep deletes it
    with its facts (`Memory.sweep_items`); None: it never expires."""

    namespace: Sequence[str]
    key: str
    value: Mapping[str, Any] | None
    text: str | None = None
    ttl_minutes: float | None = None


@dataclass(frozen=True, kw_only=True)
class StoredItem:
    """A stored item. `score`, in a search by query: the fused recall score of its fact; 0.0 when
    recall did not keep its fact (ranked after those it kept), None when it has no text."""

    dataset: str
    project: str
    namespace: Namespace
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    fact_id: int | None
    score: float | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ValidItem:
    """An `ItemInput` ready to write: its value as JSON text (None: delete) and its fact."""

    namespace: Namespace
    key: str
    value_json: str | None
    fact: ValidFact | None
    ttl_minutes: float | None = None


@dataclass(frozen=True)
class Condition:
    """One filter test: the JSON value at `path` of an item's value, compared with `value_json`
    (`IS_OBJECT`: is a JSON object; `value_json` unused)."""

    path: tuple[str, ...]
    op: Comparison | Literal["object"]
    value_json: str


def check_namespace(value: Any, field: str = "namespace", *, empty: bool = False) -> Namespace:
    """A tuple of non-empty string labels (`empty`: the root, (), is allowed)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError(f"{field} must be a tuple of strings, got {type(value).__name__}")
    labels = tuple(value)
    if not labels and not empty:
        raise ValidationError(f"{field} must hold at least one label")
    if len(labels) > MAX_NAMESPACE_LABELS:
        raise LimitError(f"{field} has {len(labels)} labels; the limit is {MAX_NAMESPACE_LABELS}")
    for label in labels:
        check_text(label, f"{field} label", MAX_LABEL_CHARS)
    return labels


def check_key(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"key must be a string, got {type(value).__name__}")
    return check_text(value, "key", MAX_KEY_CHARS, required=False)


def check_value(value: Any) -> Mapping[str, Any] | None:
    """An item's value: a mapping, or None to delete. Anything else raises `ArgumentTypeError`
    (a `ValueError` and a `TypeError`, as LangGraph's `InMemoryStore` raises one or the other)."""
    if value is not None and not isinstance(value, Mapping):
        raise ArgumentTypeError(f"an item's value must be a dict (or None to delete), got {type(value).__name__}")
    return value


def value_json(value: Mapping[str, Any]) -> str:
    """`value` (a mapping with string keys: `check_value`) as JSON text PostgreSQL's jsonb can
    hold: no NaN or infinity, no NUL character, within `MAX_ITEM_JSON_CHARS`."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise ValidationError(f"an item's value must be JSON (string keys, no NaN): {exc}") from None
    if "\\u0000" in text:
        raise InvalidTextError("an item's value contains a NUL character, which PostgreSQL cannot store; remove it")
    if len(text) > MAX_ITEM_JSON_CHARS:
        raise TextTooLongError(f"an item's value is {len(text)} characters of JSON; the limit is {MAX_ITEM_JSON_CHARS}")
    return text


MAX_TTL_MINUTES = 100 * 365 * 24 * 60.0
"""A century: an item's TTL (longer ones overflow no timestamp, but mean "never": give None)."""


def check_ttl(value: Any) -> float | None:
    """A TTL in minutes: a positive finite number up to `MAX_TTL_MINUTES`, or None (no expiry)."""
    if value is None:
        return None
    check_number(value, "ttl_minutes", positive=True, unit="minutes (or None)")
    if value > MAX_TTL_MINUTES:
        raise LimitError(f"ttl_minutes is {value}; the limit is {MAX_TTL_MINUTES:.0f} (give None for no expiry)")
    return float(value)


def fact_text(text: str) -> str | None:
    """`text` as one line within the fact object limit (cut at the last space before it); None if
    nothing is left."""
    line = collapse_line(check_text(text, "text", MAX_ITEM_JSON_CHARS, required=False))
    if len(line) > limits.MAX_OBJECT_CHARS:
        cut = line[: limits.MAX_OBJECT_CHARS]
        line = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return line or None


def validate_items(items: Sequence[ItemInput | Mapping[str, Any]], *, now: datetime) -> list[ValidItem]:
    """Check every item; the last write of a (namespace, key) wins, as if applied in order."""
    if isinstance(items, Mapping | ItemInput) or not isinstance(items, Sequence):
        raise ValidationError("items must be a list of ItemInput objects or dicts")
    check_batch_size(len(items), "items")
    chosen: dict[tuple[Namespace, str], ValidItem] = {}
    for position, raw in enumerate(items, start=1):
        item = raw if isinstance(raw, ItemInput) else _as_input(raw, position)
        namespace, key = check_namespace(item.namespace), check_key(item.key)
        value = check_value(item.value)
        data = None if value is None else value_json(value)
        fact = None
        text = None if data is None or item.text is None else fact_text(item.text)
        if text is not None:
            fact = validate_fact(
                {
                    "subject": ITEM_SUBJECT,
                    "predicate": ITEM_PREDICATE,
                    "object": text,
                    "object_type": LITERAL,
                    "valid_at": now,  # an item's text holds from its put, so a replaced text ends there
                },
                position=position,
            )
        chosen.pop((namespace, key), None)  # re-inserted last: the order of the final writes
        ttl = check_ttl(item.ttl_minutes)
        chosen[(namespace, key)] = ValidItem(namespace=namespace, key=key, value_json=data, fact=fact, ttl_minutes=ttl)
    return list(chosen.values())


def _as_input(raw: Any, position: int) -> ItemInput:
    if not isinstance(raw, Mapping):
        raise ValidationError(f"item {position} must be an ItemInput or a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"namespace", "key", "value", "text", "ttl_minutes"})
    if unknown or "namespace" not in raw or "key" not in raw or "value" not in raw:
        raise ValidationError(
            f"item {position} needs namespace, key and value (and may have text, ttl_minutes); got {sorted(raw)}"
        )
    return ItemInput(**dict(raw))


def parse_filter(filter: Mapping[str, Any] | None) -> list[Condition]:
    """LangGraph's filter: `{"field": value}` (equal; a nested mapping matches an object whose fields
    match it, so `{}` matches any object) or
    `{"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": value}}`. A missing field is JSON
    null for `$eq`/`$ne`; an order comparison holds between numbers, a number written in a string
    counting as one (`items.statements.NUMBER_TEXT`), or between other strings."""
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        raise ValidationError(f"filter must be a mapping, got {type(filter).__name__}")
    conditions: list[Condition] = []
    _conditions(filter, (), conditions)
    return conditions


def _conditions(filter: Mapping[Any, Any], path: tuple[str, ...], out: list[Condition]) -> None:
    for field, wanted in filter.items():
        if not isinstance(field, str) or field.startswith("$"):
            raise ValidationError(f"filter field {field!r} must be a string that does not start with '$'")
        here = (*path, field)
        if isinstance(wanted, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op not in COMPARISONS:
                    raise ValidationError(f"unknown filter operator {op!r}; use one of {sorted(COMPARISONS)}")
                out.append(Condition(here, op, _operand(operand, op)))
        elif isinstance(wanted, Mapping):
            out.append(Condition(here, IS_OBJECT, "null"))  # before its fields: `{}` tests this alone
            _conditions(wanted, here, out)
        else:
            out.append(Condition(here, "$eq", _operand(wanted, "$eq")))


def _operand(value: Any, op: str) -> str:
    if op not in ("$eq", "$ne") and not (is_number(value) or isinstance(value, str)):
        raise ValidationError(f"{op} compares numbers or strings, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"a filter value must be finite, got {value!r}")
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"a filter value must be JSON: {exc}") from None


@dataclass(frozen=True)
class NamespaceMatch:
    """Namespace patterns as SQL takes them: label positions (1-based from the start, negative from
    the end), the label each must equal, and the fewest labels a namespace needs."""

    positions: tuple[int, ...]
    labels: tuple[str, ...]
    min_labels: int


def parse_match(conditions: Sequence[tuple[str, Sequence[str]]]) -> NamespaceMatch:
    """("prefix" | "suffix", labels) pairs, all of which a namespace must match; "*" matches any
    one label."""
    positions: list[int] = []
    labels: list[str] = []
    least = 0
    for condition in conditions:
        if not isinstance(condition, Sequence) or len(condition) != 2:
            raise ValidationError(f"a namespace condition is (match_type, path), got {condition!r}")
        kind, path = condition
        if kind not in ("prefix", "suffix"):
            raise ValidationError(f"match_type must be 'prefix' or 'suffix', got {kind!r}")
        pattern = check_namespace(path, f"{kind} path", empty=True)
        least = max(least, len(pattern))
        for index, label in enumerate(pattern):
            if label != "*":
                positions.append(index + 1 if kind == "prefix" else index - len(pattern))
                labels.append(label)
    return NamespaceMatch(tuple(positions), tuple(labels), least)


def check_page(limit: Any, offset: Any, *, most: int) -> tuple[int, int]:
    for name, value in (("limit", limit), ("offset", offset)):
        check_int(value, name, low=0)
    if limit + offset > most:
        raise LimitError(f"limit + offset is {limit + offset}; at most {most} here")
    return limit, offset


def check_max_depth(value: Any) -> int | None:
    return check_int(value, "max_depth", low=1, or_none=True)


class ItemScope(NamedTuple):
    """Where items are read: a project, and a dataset in it or None (every dataset of the project)."""

    dataset: str | None
    project: str


def check_item_scope(dataset: Any, project: Any) -> ItemScope:
    """A project, and a dataset in it or None (every dataset of the project)."""
    scope = check_scope("-" if dataset is None else dataset, project)
    return ItemScope(None if dataset is None else scope.dataset, scope.project)
