"""Dates named in a question, resolved to a time window against the time of the question (pure).

`question_window("what did I do on 7 May 2023?", at)` is the window [2023-05-07, 2023-05-08).
Read: ISO days ("2023-05-07") and months ("2023-05"); a day with its month, in either order, with
or without a year ("7 May", "May 7th, 2023"); a month with a year ("March 2023"); a month after
"in", "during", "since", "last", ... ("in March"); a year after such a word ("in 2022");
"today", "yesterday"; "this/last week, month, year", "last weekend"; "last Monday" or "on Monday";
"N days / weeks / months / years ago". "before X" opens the window's start, "since X" and
"after X" run it to the question's time. Several dates give the span from the earliest to the
latest.

What is not read, and why: a date without a year (or a weekday after "on") means its nearest
occurrence, so "on Friday" said on a Tuesday is a plan for this Friday; a window that starts after
the question (a plan: "next week", "tomorrow") is no window, since no stored fact began or held
then that the question's own liveness does not already cover. A span given by an event ("before I
moved") names no date: finding the event's own date would take a recall of its own, so it is left
to the other signals. Vague spans ("recently", "a while ago") are no window either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
WEEKDAYS = {
    day: n for n, day in enumerate(("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))
}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_LEAD = r"(?P<lead>\b(?:before|since|after|from|until|by)\s+(?:the\s+)?)?"

_NEEDS = r"(?P<lead>\b(?:before|since|after|from|in|during|of|last|this|until|by|between|early|late|mid)\s+(?:the\s+)?)"
"""A bare month or year is a date only after one of these ("in March", "since 2020"): "may" and
"march" are also verbs, and a four-digit number is often a count."""

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("iso_day", _LEAD + r"\b(?P<year>\d{4})-(?P<mon>\d\d)-(?P<day>\d\d)\b"),
        ("iso_month", _LEAD + r"\b(?P<year>\d{4})-(?P<mon>\d\d)\b(?!-)"),
        ("day_month", _LEAD + r"\b" + _DAY + r"(?:\s+of)?\s+" + _MONTH + r"(?:,?\s+" + _YEAR + r")?\b"),
        (
            "month_day",
            _LEAD + r"\b" + _MONTH + r"\s+" + _DAY + r"\b(?!\s*(?:%|:|[ap]\.?m\b))(?:,?\s+" + _YEAR + r"\b)?",
        ),
        ("month_year", _LEAD + r"\b" + _MONTH + r",?\s+" + _YEAR + r"\b"),
        ("month", _NEEDS + _MONTH + r"\b"),
        ("year", r"(?:" + _NEEDS + r"|\byear\s+)" + _YEAR + r"\b"),
        ("relative_day", _LEAD + r"\b(?P<word>today|tonight|this morning|this afternoon|this evening|yesterday)\b"),
        ("relative_span", _LEAD + r"\b(?P<which>this|last|past)\s+(?P<unit>week|weekend|month|year)\b"),
        ("weekday", _LEAD + r"\b(?P<which>last|on|this past)\s+(?P<weekday>" + "|".join(WEEKDAYS) + r")\b"),
        (
            "ago",
            _LEAD + r"\b(?P<n>\d{1,2}|a|an|one|two|three|four|five|six)\s+(?P<unit>day|week|month|year)s?\s+ago\b",
        ),
    )
)


_CUE = re.compile(
    r"\d|\b(?:"
    + "|".join(
        sorted(
            {*MONTHS, *WEEKDAYS, "today", "tonight", "morning", "afternoon", "evening", "yesterday"}
            | {"week", "month", "year", "ago"},
            key=len,
            reverse=True,
        )
    )
    + ")",
    re.IGNORECASE,
)
"""What every date of `_PATTERNS` holds: a digit, or a word of a month, a weekday or a relative date
at a word's start (each pattern has it after a word boundary). A question without one names no date,
and is answered by this one scan instead of the patterns' eleven."""


@dataclass(frozen=True, kw_only=True)
class Window:
    """A span of time a question names: [start, end), whole days, start None when open ("before
    2020"). It may reach past the question's time ("today", "this year"): the date signal lists only
    facts valid by then."""

    start: datetime | None
    end: datetime
    said: str
    """The words that named it, as the question has them (joined by "; " when several)."""

    def describe(self) -> str:
        """The window in words a person can check: "2023-05-07 to 2023-05-08 ("7 May 2023")"."""
        start = "the beginning" if self.start is None else _day_text(self.start)
        return f'{start} to {_day_text(self.end)} ("{self.said}")'


def _day_text(moment: datetime) -> str:
    return moment.date().isoformat()


@lru_cache(maxsize=256)
def question_window(text: str | None, at: datetime) -> Window | None:
    """The window `text` names, resolved against `at` (the time of the question, timezone-aware;
    naive means UTC); None when it names no date, or only dates after `at`. Memoized: pure, and
    a recall asks it three times (`recall.asof`, the date signal's `runs` and `params`)."""
    if not text or _CUE.search(text) is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    spans: list[tuple[datetime | None, datetime, str]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue
            found = _found(kind, match, at)
            if found is None:
                continue
            taken.append(match.span())
            start, end = found
            if start is not None and start >= at:
                continue  # a plan, not a memory (see the module docstring)
            spans.append((start, end, match.group().strip()))
    if not spans:
        return None
    spans.sort(key=lambda span: text.find(span[2]))
    starts = [start for start, _, _ in spans]
    return Window(
        start=None if None in starts else min(s for s in starts if s is not None),
        end=max(end for _, end, _ in spans),
        said="; ".join(said for _, _, said in spans),
    )


_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
"""The four non-ASCII letters `re.IGNORECASE` matches to an ASCII one (U+0130, U+0131, U+017F,
U+212A: the `re` docs), which `str.lower` leaves non-ASCII."""


def _word(text: str) -> str:
    """A word the patterns read, spelled as the tables' keys are (`MONTHS`, `WEEKDAYS`, `NUMBERS`):
    lower case ASCII wherever the pattern matched an ASCII letter."""
    return text.translate(_FOLD).lower()


def _found(kind: str, match: re.Match[str], at: datetime) -> tuple[datetime | None, datetime] | None:
    """The window one match names, its lead word applied; None when it names no date the calendar
    holds: "31 February", "2023-13-01", or a span reaching past year 9999 or before year 1 (a
    question asked as of such a time)."""
    try:
        return _lead(match.group("lead"), _resolve(kind, match, at), at)
    except (ValueError, OverflowError):
        return None


def _lead(lead: str | None, span: tuple[datetime, datetime], at: datetime) -> tuple[datetime | None, datetime]:
    word = _word((lead or "").split()[0]) if lead else ""
    start, end = span
    if word in ("before", "until", "by"):
        return None, start
    through = _midnight(at.date() + timedelta(days=1), at)  # whole days: the same words, the same window all day
    if word == "since" or word == "from":
        return start, through
    if word == "after":
        return end, through
    return start, end


def _midnight(day: date, at: datetime) -> datetime:
    return datetime.combine(day, time.min, tzinfo=at.tzinfo)


def _day(day: date, at: datetime) -> tuple[datetime, datetime]:
    start = _midnight(day, at)
    return start, start + timedelta(days=1)


def _month(year: int, month: int, at: datetime) -> tuple[datetime, datetime]:
    following = date(year + month // 12, month % 12 + 1, 1)
    return _midnight(date(year, month, 1), at), _midnight(following, at)


def _nearest(candidates: Iterator[tuple[datetime, datetime]], at: datetime) -> tuple[datetime, datetime]:
    """The candidate span nearest to `at` (a span holding `at` is nearest; ties go to the past)."""

    def distance(span: tuple[datetime, datetime]) -> tuple[timedelta, int]:
        start, end = span
        if start <= at < end:
            return timedelta(0), 0
        return (at - end, 0) if end <= at else (start - at, 1)

    return min(candidates, key=distance)


def _resolve(kind: str, match: re.Match[str], at: datetime) -> tuple[datetime, datetime]:
    """The span one match names; ValueError or OverflowError when the calendar holds none (`_found`)."""
    groups = {key: value for key, value in match.groupdict().items() if value is not None}
    today = at.date()
    if kind in ("iso_day", "iso_month"):
        year, month = int(groups["year"]), int(groups["mon"])
        if kind == "iso_month":
            return _month(year, month, at)
        return _day(date(year, month, int(groups["day"])), at)
    if kind in ("day_month", "month_day"):
        month, day = MONTHS[_word(groups["month"])], int(groups["day"])
        if "year" in groups:
            return _day(date(int(groups["year"]), month, day), at)
        return _nearest((_day(date(year, month, day), at) for year in (today.year - 1, today.year, today.year + 1)), at)
    if kind == "month_year":
        return _month(int(groups["year"]), MONTHS[_word(groups["month"])], at)
    if kind == "month":
        month = MONTHS[_word(groups["month"])]
        lead = (groups.get("lead") or "").split()
        years = range(today.year - 1, today.year + 2)
        if lead and _word(lead[0]) == "last":
            return max((s for s in (_month(y, month, at) for y in years) if s[1] <= at), key=lambda s: s[0])
        return _nearest((_month(year, month, at) for year in years), at)
    if kind == "year":
        year = int(groups["year"])
        return _midnight(date(year, 1, 1), at), _midnight(date(year + 1, 1, 1), at)
    if kind == "relative_day":
        return _day(today - timedelta(days=1 if _word(groups["word"]) == "yesterday" else 0), at)
    if kind == "relative_span":
        return _relative_span(_word(groups["which"]), _word(groups["unit"]), at)
    if kind == "weekday":
        back = (today.weekday() - WEEKDAYS[_word(groups["weekday"])]) % 7
        if _word(groups["which"]) == "on":
            ahead = (7 - back) % 7
            return _day(today - timedelta(days=back) if back <= ahead else today + timedelta(days=ahead), at)
        return _day(today - timedelta(days=back or 7), at)
    if kind == "ago":
        count = NUMBERS.get(_word(groups["n"])) or int(groups["n"])
        return _ago(count, _word(groups["unit"]), at)
    raise AssertionError(kind)


def _relative_span(which: str, unit: str, at: datetime) -> tuple[datetime, datetime]:
    today = at.date()
    past = which != "this"
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) - timedelta(days=7 if past else 0)
        if unit == "weekend":
            saturday = monday + timedelta(days=5)
            if not past and saturday > today:
                saturday -= timedelta(days=7)  # "this weekend" asked before it: the one just gone
            return _midnight(saturday, at), _midnight(saturday + timedelta(days=2), at)
        return _midnight(monday, at), _midnight(monday + timedelta(days=7), at)
    if unit == "month":
        year, month = (today.year, today.month - 1) if past else (today.year, today.month)
        if month == 0:
            year, month = year - 1, 12
        return _month(year, month, at)
    year = today.year - 1 if past else today.year
    return _midnight(date(year, 1, 1), at), _midnight(date(year + 1, 1, 1), at)


def _ago(count: int, unit: str, at: datetime) -> tuple[datetime, datetime]:
    today = at.date()
    if unit == "day":
        return _day(today - timedelta(days=count), at)
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * count)
        return _midnight(monday, at), _midnight(monday + timedelta(days=7), at)
    if unit == "month":
        index = today.year * 12 + today.month - 1 - count
        return _month(index // 12, index % 12 + 1, at)
    return _midnight(date(today.year - count, 1, 1), at), _midnight(date(today.year - count + 1, 1, 1), at)
