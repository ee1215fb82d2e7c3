"""Pure input validation. Each function returns clean values or raises one documented error."""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, time
from typing import Any, NamedTuple

from memsoda_core import limits
from memsoda_core.checks import check_bool, display
from memsoda_core.errors import (
    ConfidenceError,
    DateError,
    EmptyFieldError,
    IntervalError,
    InvalidTextError,
    LimitError,
    ScopeError,
    TextTooLongError,
    ValidationError,
)
from memsoda_core.models import LITERAL, EpisodeInput, FactInput
from memsoda_core.text import clean_query, collapse_line, fact_embedding_text, normalize_name


@dataclass(frozen=True, kw_only=True)
class Scope:
    """A tenant: every row and every query carries both names."""

    dataset: str
    project: str


@dataclass(frozen=True, kw_only=True)
class ValidFact:
    """A fact ready to write: names normalized, dates resolved, entity roles worked out."""

    subject: str
    predicate: str
    object: str
    subject_type: str
    object_type: str
    mentions: tuple[str, ...]
    anchor: str
    valid_at: datetime | None
    """None: no known start (true for as long as memory knows; stored as -infinity)."""
    invalid_at: datetime | None
    confidence: float
    source_quote: str | None
    single_valued: bool = False
    starts_when_learned: bool = False
    """With no `valid_at`: start when memory learns it, the write's time (`supersede`)."""
    times_seen: int = 1
    """How often it was written before (an import restores the exported count)."""
    item_owned: bool = False
    """Written by items alone (an import restores the exported flag, `facts.item_owned`)."""

    @property
    def object_is_entity(self) -> bool:
        return self.object_type != LITERAL

    @property
    def embedding_text(self) -> str:
        return fact_embedding_text(self.subject, self.predicate, self.object, self.anchor)

    def entity_roles(self) -> dict[str, int]:
        """Entity name -> role bits (1 subject, 2 object, 4 mention) for the fact_entities table."""
        roles: dict[str, int] = {self.subject: 1}
        if self.object_is_entity:
            roles[self.object] = roles.get(self.object, 0) | 2
        for name in self.mentions:
            roles[name] = roles.get(name, 0) | 4
        return roles


@dataclass(frozen=True, kw_only=True)
class ValidEpisode:
    text: str
    thread_id: str | None
    created_at: datetime


def load_json(text: str | bytes) -> Any:
    """`json.loads`, each way it can fail on text from outside as a `ValidationError` saying why:
    not JSON, nested too deeply (`RecursionError`), or an integer too long to read (Python's
    `sys.get_int_max_str_digits`, a `ValueError`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not valid JSON ({exc.msg} at {exc.pos})") from None
    except RecursionError:
        raise ValidationError("JSON nested too deeply") from None
    except ValueError as exc:  # the integer-digits limit
        raise ValidationError(f"JSON with a number too long to read ({exc})") from None


def check_text(value: Any, field: str, max_chars: int, *, required: bool = True) -> str:
    """A storable string: no NUL, no lone surrogate, within `max_chars`, non-empty if required."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidTextError(f"{field} contains a NUL byte, which PostgreSQL cannot store; remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTextError(
            f"{field} contains characters that are not valid UTF-8 ({exc.reason}); fix the encoding"
        ) from None
    if len(value) > max_chars:
        raise TextTooLongError(f"{field} is {len(value)} characters; the limit is {max_chars}")
    if required and not value.strip():
        raise EmptyFieldError(f"{field} must not be empty")
    return value


def check_line(value: Any, field: str, max_chars: int) -> str:
    """`check_text`, collapsed to one line, and still non-empty after collapsing (a control or
    bidi character alone is empty text)."""
    line = collapse_line(check_text(value, field, max_chars))
    if not line:
        raise EmptyFieldError(f"{field} must not be empty (it holds only control or formatting characters)")
    return line


def check_scope(dataset: Any, project: Any) -> Scope:
    """Both tenant names present, non-empty strings within the limit."""
    for name, value in (("dataset", dataset), ("project", project)):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ScopeError(f"{name} is required: pass {name}='...' to say whose memory this is")
        if not isinstance(value, str):
            raise ScopeError(f"{name} must be a string, got {type(value).__name__}")
        try:
            check_text(value, name, limits.MAX_SCOPE_CHARS)
        except ValidationError as exc:
            raise ScopeError(str(exc)) from None
    return Scope(dataset=dataset, project=project)


def parse_time(value: Any, field: str, *, default: datetime | None = None) -> datetime | None:
    """A timezone-aware UTC datetime from a datetime, date or ISO-8601 string; None stays `default`."""
    if value is None:
        return default
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time.min)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise DateError(
                f"{field}={display(value)} is not an ISO-8601 date such as 2026-08-16 or 2026-08-16T09:30:00Z"
            ) from None
    else:
        raise DateError(f"{field} must be a datetime, date or ISO-8601 string, got {type(value).__name__}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise DateError(f"{field}={display(value)} is outside the dates PostgreSQL and Python can hold") from None


class ReadTimes(NamedTuple):
    """The times of a read, each None when not given: valid time and transaction time."""

    as_of: datetime | None
    known_at: datetime | None


def check_times(as_of: Any, known_at: Any) -> ReadTimes:
    """A read's `as_of` and `known_at`, parsed; `as_of` defaults to `known_at` ("what memory held
    true at T, as it knew it then")."""
    known = parse_time(known_at, "known_at")
    when = parse_time(as_of, "as_of")
    return ReadTimes(as_of=when if when is not None else known, known_at=known)


def _check_type(value: Any, field: str) -> str:
    return check_line(value, field, limits.MAX_TYPE_CHARS).upper().replace(" ", "_")


def _check_name(value: Any, field: str, max_chars: int = limits.MAX_NAME_CHARS) -> str:
    name = normalize_name(check_text(value, field, max_chars))
    if not name:
        raise EmptyFieldError(f"{field} must not be empty")
    return name


def integer(value: Any) -> int | None:
    """`value` as an int when it is an integer of any kind (Python's, numpy's), not a bool; else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _check_confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's floats are Real too
        raise ConfidenceError(f"confidence must be a number between 0 and 1, got {display(value)}")
    # an integer is compared before converting: one beyond the float range cannot be (NaN fails both)
    number = value if isinstance(value, int) else float(value)
    if not 0 <= number <= 1:
        raise ConfidenceError(f"confidence must be between 0 and 1, got {display(value)}")
    return float(number)


_FACT_FIELDS = frozenset(f.name for f in fields(FactInput))
_EPISODE_FIELDS = frozenset(f.name for f in fields(EpisodeInput))


def _as_fact_input(item: FactInput | Mapping[str, Any], position: int) -> FactInput:
    if isinstance(item, FactInput):
        return item
    if not isinstance(item, Mapping):
        raise ValidationError(f"fact #{position} must be a dict or FactInput, got {type(item).__name__}")
    unknown = sorted(set(item) - _FACT_FIELDS)
    if unknown:
        raise ValidationError(f"fact #{position} has unknown field(s) {unknown}; allowed: {sorted(_FACT_FIELDS)}")
    for required in ("subject", "predicate", "object"):
        if required not in item:
            raise EmptyFieldError(f"fact #{position} is missing {required!r}")
    return FactInput.from_mapping(item)


def validate_fact(item: FactInput | Mapping[str, Any], *, position: int = 0) -> ValidFact:
    """Check and normalize one fact; raise the documented error naming the field and what to fix.
    No `valid_at` means no known start (`ValidFact.valid_at` None), not "from now"."""
    fact = _as_fact_input(item, position)
    try:
        subject = _check_name(fact.subject, "subject")
        predicate = check_line(fact.predicate, "predicate", limits.MAX_PREDICATE_CHARS)
        object_type = _check_type(fact.object_type, "object_type")
        if object_type == LITERAL:
            obj = check_line(fact.object, "object", limits.MAX_OBJECT_CHARS)
        else:
            obj = _check_name(fact.object, "object")
        if isinstance(fact.mentions, str) or not isinstance(fact.mentions, Iterable):
            raise ValidationError("mentions must be a list of entity names")
        mentions_list = list(fact.mentions)
        if len(mentions_list) > limits.MAX_MENTIONS:
            raise LimitError(f"a fact may mention at most {limits.MAX_MENTIONS} entities, got {len(mentions_list)}")
        entities = {subject, obj} if object_type != LITERAL else {subject}
        mentions = tuple(
            dict.fromkeys(m for m in (_check_name(v, "mentions[]") for v in mentions_list) if m not in entities)
        )
        if fact.anchor is None:
            anchor = obj if object_type != LITERAL else subject
        else:
            anchor = _check_name(fact.anchor, "anchor")
            if anchor not in entities and anchor not in mentions:
                mentions = (*mentions, anchor)
        valid_at = parse_time(fact.valid_at, "valid_at")
        invalid_at = parse_time(fact.invalid_at, "invalid_at")
        if invalid_at is not None and valid_at is not None and invalid_at <= valid_at:
            raise IntervalError(
                f"invalid_at ({invalid_at.date()}) must be after valid_at ({valid_at.date()}); "
                "leave invalid_at empty for a fact that is still true"
            )
        check_bool(fact.single_valued, "single_valued")
        quote = fact.source_quote
        if quote is not None:
            quote = check_text(quote, "source_quote", limits.MAX_SOURCE_QUOTE_CHARS, required=False)
        return ValidFact(
            subject=subject,
            predicate=predicate,
            object=obj,
            subject_type=_check_type(fact.subject_type, "subject_type"),
            object_type=object_type,
            mentions=mentions,
            anchor=anchor,
            valid_at=valid_at,
            invalid_at=invalid_at,
            confidence=_check_confidence(fact.confidence),
            source_quote=quote,
            single_valued=fact.single_valued,
        )
    except ValidationError as exc:
        if position:
            raise type(exc)(f"fact #{position}: {exc}") from None
        raise


def validate_facts(items: Sequence[FactInput | Mapping[str, Any]]) -> list[ValidFact]:
    """Validate a whole batch before anything is written. Positions in messages are 1-based."""
    if isinstance(items, Mapping | FactInput) or not isinstance(items, Sequence):
        raise ValidationError("facts must be a list of dicts or FactInput objects")
    check_batch_size(len(items), "facts")
    return [validate_fact(item, position=i) for i, item in enumerate(items, start=1)]


def validate_episode(item: EpisodeInput | Mapping[str, Any], *, now: datetime, position: int = 0) -> ValidEpisode:
    """Check one episode summary."""
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - _EPISODE_FIELDS)
        if unknown:
            raise ValidationError(
                f"episode #{position} has unknown field(s) {unknown}; allowed: {sorted(_EPISODE_FIELDS)}"
            )
        if "text" not in item:
            raise EmptyFieldError(f"episode #{position} is missing 'text'")
        item = EpisodeInput(**dict(item))
    if not isinstance(item, EpisodeInput):
        raise ValidationError(f"episode #{position} must be a dict or EpisodeInput")
    thread = item.thread_id
    if thread is not None:
        thread = check_line(thread, "thread_id", limits.MAX_THREAD_ID_CHARS)
    created = parse_time(item.created_at, "created_at", default=now)
    assert created is not None
    return ValidEpisode(
        text=check_text(item.text, "episode text", limits.MAX_EPISODE_CHARS),
        thread_id=thread,
        created_at=created,
    )


def check_batch_size(size: int, what: str) -> None:
    if size > limits.MAX_BATCH:
        raise LimitError(f"at most {limits.MAX_BATCH} {what} per call, got {size}; split the batch or use import_jsonl")


def check_query(query: Any) -> str | None:
    """A recall query: None / blank means "no query"; otherwise a string within the limit, cleaned
    (`text.clean_query`)."""
    if query is None:
        return None
    if not isinstance(query, str):
        raise ValidationError(f"query must be a string or None, got {type(query).__name__}")
    if len(query) > limits.MAX_QUERY_CHARS:
        raise TextTooLongError(f"query is {len(query)} characters; the limit is {limits.MAX_QUERY_CHARS}")
    cleaned = clean_query(query)
    return cleaned if cleaned.strip() else None


def check_optional_scope(dataset: Any, project: Any) -> tuple[str | None, str | None]:
    """Filters of `stats`: each None (all) or a valid name."""
    checked = check_scope(dataset if dataset is not None else "-", project if project is not None else "-")
    return (checked.dataset if dataset is not None else None, checked.project if project is not None else None)


def check_entity_name(value: Any) -> str:
    """An entity name for `forget`, normalized."""
    return _check_name(value, "entity")
