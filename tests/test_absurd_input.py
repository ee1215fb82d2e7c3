"""Absurd values from outside (the caller, an import file, a model's answer) through the public API
against the real server: integers beyond any float or column, numbers too long for Python to read,
infinities, values nested thousands deep. Each is refused with the documented error for its path
(ConfidenceError / ImportFormatError / a rejected operation or ExtractionError), nothing is half
written, and `on_error="skip"` skips exactly the bad lines. Never a raw OverflowError, ValueError,
RecursionError or a database "out of range"."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsoda_core import (
    ConfidenceError,
    ExtractionError,
    ImportFormatError,
    LimitError,
    ScopeArgs,
    ValidationError,
)
from memsoda_core.learning.messages import check_messages
from memsoda_core.learning.operations import check_answer
from memsoda_core.limits import MAX_TIMES_SEEN
from memsoda_core.ops import parse_jsonl
from memsoda_core.validation import validate_fact
from tests.conftest import Either
from tests.scripted_extractor import ScriptedExtractor, add, answer

HUGE_DIGITS = "1" * 5_000
"""An integer Python will not read from text (over `sys.get_int_max_str_digits`, 4,300)."""

GOOD = json.dumps({"subject": "user", "predicate": "likes", "object": "tea"})
OTHER = json.dumps({"subject": "user", "predicate": "likes", "object": "coffee"})


def nested(depth: int, inner: Any = 1) -> Any:
    """`inner` inside `depth` lists (built without recursion)."""
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def fact(**fields: Any) -> dict[str, Any]:
    return {"subject": "user", "predicate": "likes", "object": "tea", **fields}


# --- the caller ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "confidence",
    [10**400, -(10**400), 10**5_000, float("inf"), float("-inf"), float("nan"), 1e400, nested(5_000)],
    ids=["10**400", "-10**400", "10**5000", "inf", "-inf", "nan", "1e400", "nested"],
)
async def test_absurd_confidence_is_a_confidence_error(memory: Either, scope: ScopeArgs, confidence: Any) -> None:
    with pytest.raises(ConfidenceError, match="fact #2: confidence must be"):
        await memory.add_facts([fact(), fact(object="coffee", confidence=confidence)], **scope)
    assert await memory.stats(**scope) == []  # nothing of the batch was written


async def test_absurd_vectors_and_options_are_validation_errors(memory: Either, scope: ScopeArgs) -> None:
    dims = memory.info.dimensions
    with pytest.raises(ValidationError, match="vectors are not usable"):
        await memory.add_facts([fact()], **scope, vectors=[[10**400] * dims])
    with pytest.raises(ValidationError, match="query_embedding is not usable"):
        await memory.recall("tea", **scope, query_embedding=[10**400] * dims)
    with pytest.raises(ValidationError, match="query_embedding is not usable: got a vector of dimension 3, expected"):
        await memory.recall("tea", **scope, query_embedding=[0.1, 0.2, 0.3])  # the caller's, not the embedder's
    with pytest.raises(LimitError, match=r"anchor\.vector_top_k must be an int between"):
        await memory.recall("tea", **scope, anchor_vector_top_k=10**30)
    with pytest.raises(LimitError, match="rrf_k must be an int between"):
        await memory.recall("tea", **scope, rrf_k=2**31)
    assert await memory.stats(**scope) == []


# --- an import file ------------------------------------------------------------------------------

BAD_LINES = {
    "5000-digit confidence": '{"subject": "a", "predicate": "b", "object": "c", "confidence": ' + HUGE_DIGITS + "}",
    "5000-digit id": '{"kind": "fact", "id": ' + HUGE_DIGITS + ', "subject": "a", "predicate": "b", "object": "c"}',
    "5000-digit times_seen": '{"subject": "a", "predicate": "b", "object": "c", "times_seen": ' + HUGE_DIGITS + "}",
    "5000-digit line": HUGE_DIGITS,
    "times_seen 10**20": json.dumps(fact(object="c", times_seen=10**20)),
    "times_seen 2**31": json.dumps(fact(object="c", times_seen=2**31)),
    "times_seen 2**63": json.dumps(fact(object="c", times_seen=2**63)),
    "times_seen over the limit": json.dumps(fact(object="c", times_seen=MAX_TIMES_SEEN + 1)),
    "times_seen 0": json.dumps(fact(object="c", times_seen=0)),
    "times_seen true": json.dumps(fact(object="c", times_seen=True)),
    "times_seen 1.5": json.dumps(fact(object="c", times_seen=1.5)),
    "confidence 10**400": json.dumps(fact(object="c", confidence=10**400)),
    "confidence 1e400": '{"subject": "a", "predicate": "b", "object": "c", "confidence": 1e400}',
    "confidence -1e400": '{"subject": "a", "predicate": "b", "object": "c", "confidence": -1e400}',
    "confidence nested 900": json.dumps(fact(object="c", confidence=nested(900))),
    "kind nested 900": json.dumps(fact(object="c", kind=nested(900))),
    "single_valued nested 900": json.dumps(fact(object="c", single_valued=nested(900))),
    "mentions nested 900": json.dumps(fact(object="c", mentions=[nested(900)])),
    "line nested 100000": "[" * 100_000 + "]" * 100_000,
    "object nested 100000": '{"subject": "a", "predicate": "b", "object": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "episode created_at 10**400": json.dumps({"kind": "episode", "text": "x", "created_at": 10**400}),
}


@pytest.mark.parametrize("line", list(BAD_LINES.values()), ids=list(BAD_LINES))
async def test_absurd_import_lines_are_import_format_errors(memory: Either, scope: ScopeArgs, line: str) -> None:
    source = f"{GOOD}\n{line}\n{OTHER}\n"
    with pytest.raises(ImportFormatError, match="line 2") as raised:
        await memory.import_jsonl(io.StringIO(source), **scope)
    assert raised.value.line == 2
    assert await memory.stats(**scope) == []
    # skipping: exactly the bad line is left out, both good lines are imported
    report = await memory.import_jsonl(io.StringIO(source), **scope, on_error="skip")
    assert (report.facts, report.skipped, [number for number, _ in report.errors]) == (2, 1, [2])
    page = await memory.list_facts(**scope)
    assert sorted(f.object for f in page.facts) == ["coffee", "tea"]


async def test_a_file_path_not_utf8_names_its_line_and_a_leading_bom_is_dropped(
    memory: Either, scope: ScopeArgs, tmp_path: Path
) -> None:
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(f"{GOOD}\n".encode() + json.dumps(fact(object="café"), ensure_ascii=False).encode("latin-1"))
    with pytest.raises(ImportFormatError, match="line 2: not UTF-8") as raised:
        await memory.import_jsonl(latin, **scope)
    assert raised.value.line == 2 and await memory.stats(**scope) == []
    marked = tmp_path / "bom.jsonl"
    marked.write_text(f"{GOOD}\n{OTHER}\n", encoding="utf-8-sig")
    for source in (marked, io.StringIO(marked.read_text(encoding="utf-8"))):  # a path, and text still holding it
        report = await memory.import_jsonl(source, **scope, on_error="raise")
        assert (report.facts, report.skipped) == (2, 0)


async def test_numpy_numbers_are_numbers(memory: Either, scope: ScopeArgs) -> None:
    """What an application computed with numpy: a float32 confidence, int64 fact ids."""
    (added,) = await memory.add_facts([fact(object="tea", confidence=np.float32(0.75))], **scope)
    fetched = await memory.get_fact(np.int64(added), **scope)
    assert fetched.id == added and fetched.confidence == pytest.approx(0.75)
    result = await memory.recall("tea", **scope, exclude=[np.int64(added)])
    assert added not in {f.fact.id for f in result.facts}
    assert await memory.invalidate(np.int64(added), **scope)
    with pytest.raises(ValidationError, match="fact_id must be an int"):
        await memory.get_fact(np.float64(added), **scope)


async def test_the_largest_times_seen_is_imported_exactly(memory: Either, scope: ScopeArgs) -> None:
    line = json.dumps(fact(times_seen=MAX_TIMES_SEEN))
    report = await memory.import_jsonl(io.StringIO(f"{line}\n"), **scope)
    assert report.facts == 1
    (stored,) = (await memory.list_facts(**scope)).facts
    assert stored.times_seen == MAX_TIMES_SEEN
    # and it still counts on: a repetition adds one, within the column
    (again,) = await memory.add_facts([fact()], **scope)
    assert again == stored.id
    assert (await memory.get_fact(stored.id, **scope)).times_seen == MAX_TIMES_SEEN + 1


# --- a model's answer ----------------------------------------------------------------------------

WINDOW = [{"role": "user", "content": "I like tea and I like coffee.", "id": "m1"}]


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"operations": ' + "[" * 5_000 + "]" * 5_000 + "}",
        '{"operations": [], "summary": ' + HUGE_DIGITS + "}",
        "```json\n" + "{" * 50_000 + "\n```",
    ],
    ids=["nested 100000", "operations nested 5000", "5000-digit number", "fenced"],
)
async def test_unreadable_model_answers_are_extraction_errors(memory: Either, scope: ScopeArgs, raw: str) -> None:
    with pytest.raises(ExtractionError):
        await memory.remember(WINDOW, **scope, extractor=ScriptedExtractor(raw))
    assert await memory.stats(**scope) == []


def _absurd_operations() -> list[dict[str, Any]]:
    """Each operation absurd in one value; the last one is good."""
    tea = "I like tea"
    return [
        add("user", "likes", "tea", tea, confidence=10**400),
        add("user", "likes", "tea", tea, confidence=float("inf")),
        add("user", "likes", "tea", tea, confidence=nested(5_000)),
        add("user", "likes", "tea", tea, mentions=[nested(5_000)]),
        add("user", "likes", "tea", tea, valid_at=nested(5_000)),
        {**add("user", "likes", "tea", tea), "op": nested(5_000)},
        {**add("user", "likes", "tea", tea), "op": 10**5_000},
        {**add("user", "likes", "tea", tea), "op": "supersede", "fact_id": 10**5_000},
        {**add("user", "likes", "tea", tea), "op": "end", "fact_id": nested(5_000), "source_quote": tea},
        add("user", "likes", "coffee", "I like coffee"),
    ]


async def test_absurd_operations_are_rejected_and_the_good_one_is_written(memory: Either, scope: ScopeArgs) -> None:
    operations = _absurd_operations()
    result = await memory.remember(WINDOW, **scope, extractor=ScriptedExtractor(answer(*operations)))
    assert [r.index for r in result.rejected] == list(range(len(operations) - 1))
    assert all(len(r.reason) < 1_000 and len(r.op) < 1_000 for r in result.rejected)
    (added,) = result.added
    assert (await memory.get_fact(added, **scope)).object == "coffee"
    # a JSON answer: 1e400 reads as infinity and is refused like any confidence out of range
    text = json.dumps(answer(add("user", "likes", "tea", "I like tea"))).replace(
        '"confidence": 1.0', '"confidence": 1e400'
    )
    result = await memory.remember(WINDOW, **scope, extractor=ScriptedExtractor(text))
    (rejected,) = result.rejected
    assert "confidence must be between 0 and 1, got inf" in rejected.reason
    with pytest.raises(ExtractionError) as raised:
        await memory.remember(WINDOW, **scope, extractor=ScriptedExtractor(answer(*operations)), on_invalid="raise")
    assert len(raised.value.rejected) == len(operations) - 1
    assert [f.object for f in (await memory.list_facts(**scope)).facts] == ["coffee"]


# --- properties of the pure checks: any JSON value in any field -----------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**400, -(10**400), 2**31, 2**63])
    | st.integers(min_value=4_400, max_value=5_000).map(lambda digits: 10**digits)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)
depths = st.sampled_from([0, 0, 0, 900, 5_000])
"""How deep the drawn value is wrapped in lists (built in the test: hypothesis cannot print it)."""

FIELDS = ["subject", "predicate", "object", "subject_type", "object_type", "mentions", "anchor", "valid_at",
          "invalid_at", "confidence", "source_quote", "single_valued"]  # fmt: skip
NOW = datetime(2026, 3, 10, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=json_values, depth=depths)
def test_any_value_in_a_fact_field_is_valid_or_a_validation_error(field: str, value: Any, depth: int) -> None:
    value = nested(depth, value)
    with contextlib.suppress(ValidationError):
        validate_fact(fact(**{field: value}))


def _json_text(value: Any) -> str:
    """`value` as JSON text, even where `json.dumps` refuses (a 5,000-digit integer, deep nesting)."""
    try:
        return json.dumps(value)
    except ValueError:
        return HUGE_DIGITS
    except RecursionError:
        return "[" * 5_000 + "]" * 5_000


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from([*FIELDS, "times_seen", "kind", "id"]), value=json_values, depth=depths)
def test_any_value_in_an_import_line_is_imported_or_skipped_with_its_line(field: str, value: Any, depth: int) -> None:
    value = nested(depth, value)
    line = GOOD[:-1] + f', "{field}": {_json_text(value)}' + "}"
    parsed = parse_jsonl([GOOD, line], now=NOW, on_error="skip")
    assert parsed.total + len(parsed.errors) == 2
    assert [number for number, _ in parsed.errors] in ([], [2])
    if parsed.errors:
        with pytest.raises(ImportFormatError, match="line 2"):
            parse_jsonl([GOOD, line], now=NOW, on_error="raise")


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    value=json_values,
    depth=depths,
    where=st.sampled_from(["fact", "op", "fact_id", "answer"]),
)
def test_any_value_in_a_model_answer_is_checked_or_refused(field: str, value: Any, depth: int, where: str) -> None:
    value = nested(depth, value)
    operation = add("user", "likes", "tea", "I like tea")
    operation["fact"][field] = value
    if where == "op":
        operation["op"] = value
    elif where == "fact_id":
        operation = {**operation, "op": "end", "fact_id": value}
    raw: Any = {"operations": [operation]} if where != "answer" else {"operations": value, "summary": None}
    messages = check_messages(WINDOW)
    try:
        checked = check_answer(raw, messages=messages, shown=(), user="user", now=NOW)
    except ExtractionError:
        assert where == "answer"
        return
    assert len(checked.operations) + len(checked.rejected) == checked.proposed
