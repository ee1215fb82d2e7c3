"""The date parser of the date-window signal: pure, table-driven, one fixed question time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsoda_core.recall.dates import _CUE, _PATTERNS, MONTHS, NUMBERS, WEEKDAYS, question_window

AT = datetime(2023, 5, 20, 15, 0, tzinfo=UTC)
"""A Saturday afternoon."""


def _day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


CASES: list[tuple[str, str | None, str | None]] = [
    ("what did I do on 7 May 2023?", "2023-05-07", "2023-05-08"),
    ("what happened on 7 May?", "2023-05-07", "2023-05-08"),
    ("May 7th, 2023", "2023-05-07", "2023-05-08"),
    ("the 2nd of May", "2023-05-02", "2023-05-03"),
    ("2023-05-07", "2023-05-07", "2023-05-08"),
    ("in 2023-04", "2023-04-01", "2023-05-01"),
    ("in March 2023", "2023-03-01", "2023-04-01"),
    ("what did we plan in March?", "2023-03-01", "2023-04-01"),
    ("last May", "2022-05-01", "2022-06-01"),
    ("in 2022", "2022-01-01", "2023-01-01"),
    ("where did I live in 2019?", "2019-01-01", "2020-01-01"),
    ("yesterday", "2023-05-19", "2023-05-20"),
    ("what did I eat today?", "2023-05-20", "2023-05-21"),
    ("last week", "2023-05-08", "2023-05-15"),
    ("last weekend", "2023-05-13", "2023-05-15"),
    ("last month", "2023-04-01", "2023-05-01"),
    ("last year", "2022-01-01", "2023-01-01"),
    ("this year", "2023-01-01", "2024-01-01"),
    ("last Friday", "2023-05-19", "2023-05-20"),
    ("last Saturday", "2023-05-13", "2023-05-14"),
    ("3 days ago", "2023-05-17", "2023-05-18"),
    ("two weeks ago", "2023-05-01", "2023-05-08"),
    ("a month ago", "2023-04-01", "2023-05-01"),
    ("since March", "2023-03-01", "2023-05-21"),
    ("after 2021", "2022-01-01", "2023-05-21"),
    ("before 2020", None, "2020-01-01"),
    ("between March and May 2023", "2023-03-01", "2023-06-01"),
]

NO_WINDOW = [
    "before I moved",  # an event, not a date: no window
    "what do I like?",
    "I may go hiking",
    "we march on",
    "I have 2000 photos",
    "next week",
    "tomorrow",
    "in June",  # the nearest June is ahead: a plan
    "on Monday",  # the nearest Monday is ahead
    "31 February",
    "",
    None,
]


@pytest.mark.parametrize(("text", "start", "end"), CASES)
def test_a_named_date_is_its_window(text: str, start: str | None, end: str) -> None:
    window = question_window(text, AT)
    assert window is not None, text
    assert window.start == (None if start is None else _day(start))
    assert window.end == _day(end)


@pytest.mark.parametrize("text", NO_WINDOW)
def test_no_date_no_window(text: str | None) -> None:
    assert question_window(text, AT) is None


def test_the_window_says_what_named_it() -> None:
    window = question_window("what did I do on 7 May 2023?", AT)
    assert window is not None
    assert window.said == "7 May 2023"
    assert window.describe() == '2023-05-07 to 2023-05-08 ("7 May 2023")'


def test_days_are_those_of_the_question_time_zone() -> None:
    tokyo = timezone(timedelta(hours=9))
    window = question_window("yesterday", datetime(2023, 5, 20, 1, 0, tzinfo=tokyo))
    assert window is not None
    assert window.start == datetime(2023, 5, 19, tzinfo=tokyo)
    assert window.end == datetime(2023, 5, 20, tzinfo=tokyo)


def test_the_same_words_give_the_same_window_all_day() -> None:
    morning, evening = (datetime(2023, 5, 20, hour, tzinfo=UTC) for hour in (8, 23))
    for text in ("today", "since March", "this week"):
        assert question_window(text, morning) == question_window(text, evening), text


def test_a_naive_question_time_is_utc() -> None:
    window = question_window("yesterday", datetime(2023, 5, 20, 12, 0))
    assert window is not None and window.start == _day("2023-05-19")


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("anything good on Netflix tonight?", datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
        ("since March", datetime(9999, 12, 31, tzinfo=UTC)),
        ("what did I do yesterday?", datetime(1, 1, 1, tzinfo=UTC)),
        ("last week", datetime(1, 1, 3, tzinfo=UTC)),
        ("last year", datetime(1, 6, 1, tzinfo=UTC)),
    ],
)
def test_a_window_past_the_calendar_s_ends_is_no_window(text: str, at: datetime) -> None:
    assert question_window(text, at) is None  # not an OverflowError out of recall


def test_a_year_less_date_is_its_nearest_occurrence() -> None:
    january = datetime(2024, 1, 3, tzinfo=UTC)
    window = question_window("on 28 December", january)
    assert window is not None and window.start == _day("2023-12-28")


@pytest.mark.parametrize("text", [text for text, _, _ in CASES] + [t for t in NO_WINDOW if t])
def test_every_date_holds_the_cue(text: str) -> None:
    """`question_window` reads only a question holding `_CUE`: every match of a pattern holds it."""
    for _, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            assert _CUE.search(match.group()), (text, match.group())


_ODD_LETTERS = str.maketrans({"s": "\u017f", "i": "\u0131", "k": "\u212a"})
"""ASCII letters to non-ASCII ones that `re.IGNORECASE` matches to them."""


@pytest.mark.parametrize(
    ("text", "start", "end"), [case for case in CASES if case[0].translate(_ODD_LETTERS) != case[0]]
)
def test_a_letter_the_patterns_match_case_blind_reads_as_its_ascii_one(text: str, start: str | None, end: str) -> None:
    """ "Auguſt 3", "laſt ſunday": what a pattern matched is read, not a KeyError."""
    window = question_window(text.translate(_ODD_LETTERS), AT)
    assert window is not None, text
    assert (window.start, window.end) == (None if start is None else _day(start), _day(end))


_VOCABULARY = [*MONTHS, *WEEKDAYS, *NUMBERS, "ago", "last", "this", "next", "on", "since", "before", "after", "of"]
_VOCABULARY += [
    "week",
    "month",
    "year",
    "today",
    "yesterday",
    "days",
    "the",
    "in",
    "what",
    "3rd",
    "2019",
    "07",
    "-",
    "/",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_VOCABULARY) | st.text(max_size=4), max_size=8))
def test_every_match_in_any_text_holds_the_cue(words: list[str]) -> None:
    """Any text a pattern reads a date in holds `_CUE` within that date, so the cue's scan skips no date."""
    text = " ".join(words)
    for _, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            assert _CUE.search(match.group()), (text, match.group())
