"""An extractor's answer, parsed and checked before anything is written (pure).

Every proposed operation must stand on the window: its quote states something (a word that is not
a function word or the speaker's, `messages.FUNCTION_WORDS`) and occurs in one of the messages, the
fact it changes is one of those the extractor was shown (so nothing in a message can make the
model touch another fact or another tenant), and its fact passes `add_facts`' validation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsoda_core.checks import display, is_int
from memsoda_core.errors import ExtractionError, ValidationError
from memsoda_core.learning.messages import WindowMessage, content_words, quoted_message
from memsoda_core.learning.schema import MODEL_FIELDS, OPERATIONS
from memsoda_core.models import Fact, RejectedOperation
from memsoda_core.validation import ValidFact, load_json, parse_time, validate_fact

SPEAKER_WORDS = frozenset({"i", "me", "myself", "user", "the user"})
"""Names a model may give the speaking user; each becomes the scope's user entity."""

ON_INVALID = ("skip", "raise")


@dataclass(frozen=True, kw_only=True)
class Checked:
    """One operation that passed: `fact` for add and supersede, `target` for supersede and end,
    `at` for end, and the message its quote came from."""

    index: int
    op: str
    message: WindowMessage
    fact: ValidFact | None = None
    target: int | None = None
    at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class CheckedExtraction:
    operations: tuple[Checked, ...]
    rejected: tuple[RejectedOperation, ...]
    summary: str | None
    proposed: int = 0
    single_valued: frozenset[str] = frozenset()
    """The scope's single-valued predicates it was checked against (`learning.applying` compares
    them with those the write finds)."""


def parse_answer(raw: Any) -> tuple[list[Any], str | None]:
    """The operations list and summary of an extractor's answer (a mapping, or JSON text, fenced
    or not); `ExtractionError` when it is neither."""
    answer = raw
    if isinstance(raw, str | bytes):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
        try:
            answer = load_json(fenced.group(1) if fenced else text)
        except ValidationError as exc:
            raise ExtractionError(f"the extractor's answer is {exc}") from None
    if not isinstance(answer, Mapping):
        raise ExtractionError(f"the extractor's answer must be an object, got {type(answer).__name__}")
    operations = answer.get("operations")
    if not isinstance(operations, list):
        raise ExtractionError("the extractor's answer has no 'operations' list")
    summary = answer.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise ExtractionError(f"the extractor's 'summary' must be text or null, got {type(summary).__name__}")
    return operations, (summary.strip() or None) if summary else None


def _op_name(data: Any) -> str:
    """The operation's `op` as reported with a rejection: its text, else a bounded repr."""
    op = data.get("op") if isinstance(data, Mapping) else "?"
    return op if isinstance(op, str) else display(op)


def _speaker(name: Any, user: str) -> Any:
    return user if isinstance(name, str) and name.strip().casefold() in SPEAKER_WORDS else name


def _quote_source(quote: Any, messages: Sequence[WindowMessage]) -> WindowMessage:
    if not isinstance(quote, str) or not quote.strip():
        raise ValidationError("it has no source_quote")
    if not content_words(quote) - SPEAKER_WORDS:
        raise ValidationError(
            f"its source_quote {quote[:80]!r} states nothing: it has no word but function words and words "
            "for the speaker; quote the words of the message that state the fact"
        )
    message = quoted_message(quote, messages)
    if message is None:
        raise ValidationError(f"its source_quote {quote[:80]!r} occurs in none of the messages")
    return message


def _fact(data: Any, user: str, now: datetime) -> ValidFact:
    if not isinstance(data, Mapping):
        raise ValidationError("it has no fact")
    unknown = sorted(set(data) - set(MODEL_FIELDS))
    if unknown:
        raise ValidationError(f"its fact has unknown field(s) {unknown}")
    given = {key: value for key, value in data.items() if value is not None}
    for key in ("subject", "object"):
        if key in given:
            given[key] = _speaker(given[key], user)
    if "mentions" in given and isinstance(given["mentions"], list):
        given["mentions"] = [m for m in given["mentions"] if _speaker(m, user) != user]
    return validate_fact(given)


def _target(data: Mapping[str, Any], shown: Mapping[int, Fact], seen: set[int]) -> int:
    fact_id = data.get("fact_id")
    if not is_int(fact_id):
        raise ValidationError(f"its fact_id must be the id of a shown fact, got {display(fact_id)}")
    if fact_id not in shown:
        raise ValidationError(f"fact {display(fact_id)} was not shown to the extractor")
    if fact_id in seen:
        raise ValidationError(f"fact {fact_id} is changed by an earlier operation")
    seen.add(fact_id)
    return fact_id


def _check_after(target: Fact, at: datetime | None, what: str) -> None:
    """A shown fact ends only after it began."""
    start = target.valid_at
    if at is not None and start is not None and at <= start:
        raise ValidationError(f"{what} {at.isoformat()} is not after fact {target.id}'s start {start.isoformat()}")


def _check_one(
    index: int,
    data: Mapping[str, Any],
    messages: Sequence[WindowMessage],
    shown: Mapping[int, Fact],
    user: str,
    now: datetime,
    seen: set[int],
) -> Checked:
    op = data.get("op")
    if op == "add":
        fact = _fact(data.get("fact"), user, now)
        return Checked(index=index, op=op, fact=fact, message=_quote_source(fact.source_quote, messages))
    if op == "supersede":
        fact = _fact(data.get("fact"), user, now)
        if fact.valid_at is None:  # the new value holds from when the window says it
            fact = dataclasses.replace(fact, valid_at=now)
        message = _quote_source(fact.source_quote, messages)
        target = _target(data, shown, seen)
        _check_after(shown[target], fact.valid_at, "its new fact's valid_at")
        return Checked(index=index, op=op, fact=fact, target=target, message=message)
    if op == "end":
        message = _quote_source(data.get("source_quote"), messages)
        at = parse_time(data.get("ended_at"), "ended_at", default=now)
        assert at is not None
        target = _target(data, shown, seen)
        _check_after(shown[target], at, "ended_at")
        return Checked(index=index, op=op, target=target, at=at, message=message)
    raise ValidationError(f"op must be one of {list(OPERATIONS)}, got {display(op)}")


Relation = tuple[str, str]
"""A fact's subject and case-folded predicate."""


def _check_order(checked: Checked, single_valued: Collection[str], unstarted: dict[Relation, Checked]) -> None:
    """Two values without a start of one single-valued relation (`single_valued`: the scope's
    predicates, case folded; or the fact's own flag) cannot be ordered (`writing.decisions`), so
    an answer may give it one: `unstarted` holds the first, by relation."""
    fact = checked.fact
    if fact is None or fact.valid_at is not None or fact.invalid_at is not None:
        return
    if not (fact.single_valued or fact.predicate.lower() in single_valued):
        return
    first = unstarted.setdefault((fact.subject, fact.predicate.lower()), checked)
    assert first.fact is not None
    if first.fact.object.lower() != fact.object.lower():
        raise ValidationError(
            f"{fact.subject} {fact.predicate} holds one value at a time and operation {first.index} already "
            f"gives it {first.fact.object!r} without valid_at; two values without valid_at have no order"
        )


def unordered_if_single_valued(checked: CheckedExtraction) -> frozenset[str]:
    """The predicates (case folded) not single-valued when `checked` was checked whose relation
    it gives two values without a start: declared single-valued since, `_check_order` would
    reject the later one."""
    values: dict[Relation, set[str]] = {}
    for operation in checked.operations:
        fact = operation.fact
        if fact is None or fact.valid_at is not None or fact.invalid_at is not None or fact.single_valued:
            continue
        values.setdefault((fact.subject, fact.predicate.lower()), set()).add(fact.object.lower())
    return frozenset(predicate for (_, predicate), objects in values.items() if len(objects) > 1) - (
        checked.single_valued
    )


def check_answer(
    raw: Any,
    *,
    messages: Sequence[WindowMessage],
    shown: Sequence[Fact],
    user: str,
    now: datetime,
    on_invalid: str = "skip",
    single_valued: Collection[str] = frozenset(),
) -> CheckedExtraction:
    """`raw` parsed (`parse_answer`) and each operation checked against the window: those that
    fail are `rejected` with their reason (`on_invalid="skip"`), or make the whole answer raise
    `ExtractionError` (`"raise"`). `now` is the window's time: the start of a new value that
    supersedes a shown fact, and the end of an ended one, when the answer gives none; an added fact
    without a start has no known start, as in `add_facts`. Of two added values without a start of
    one relation in `single_valued` (the scope's predicates), the later is rejected (`_check_order`)."""
    proposed, summary = parse_answer(raw)
    by_id = {fact.id: fact for fact in shown}
    passed: list[Checked] = []
    rejected: list[RejectedOperation] = []
    seen: set[int] = set()  # the shown facts an earlier operation changes
    unstarted: dict[Relation, Checked] = {}  # the first value without a start of each single-valued relation
    for index, data in enumerate(proposed):
        op = _op_name(data)
        try:
            if not isinstance(data, Mapping):
                raise ValidationError(f"an operation must be an object, got {type(data).__name__}")
            checked = _check_one(index, data, messages, by_id, user, now, seen)
            _check_order(checked, single_valued, unstarted)
            passed.append(checked)
        except ValidationError as exc:
            rejected.append(RejectedOperation(index=index, op=op, reason=str(exc)))
        except RecursionError:  # a value nested deeper than the checks can walk
            rejected.append(RejectedOperation(index=index, op=op, reason="a value is nested too deeply"))
    if rejected and on_invalid == "raise":
        reasons = tuple(f"operation {r.index} ({r.op}): {r.reason}" for r in rejected)
        raise ExtractionError(f"{len(rejected)} of {len(proposed)} operations failed their checks", rejected=reasons)
    return CheckedExtraction(
        operations=tuple(passed),
        rejected=tuple(rejected),
        summary=summary,
        proposed=len(proposed),
        single_valued=frozenset(single_valued),
    )
