"""Which questions are read as of the time they ask about (`recall.asof`): pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memsoda_core import ArgumentTypeError, RecallOptions
from memsoda_core.recall.asof import asks_what_held, question_as_of
from memsoda_core.recall.dates import question_window

AT = datetime(2024, 1, 10, 12, 0, tzinfo=UTC)

HELD = [
    ("where did I live in 2019?", "2019-12-31T23:59:59.999999+00:00"),
    ("what was my job in March 2022?", "2022-03-31T23:59:59.999999+00:00"),
    ("who was my manager back in 2020?", "2020-12-31T23:59:59.999999+00:00"),
    ("as of June 2021, what car did I drive?", "2021-06-30T23:59:59.999999+00:00"),
    ("where was I living last year?", "2023-12-31T23:59:59.999999+00:00"),
    ("what car did I use to drive in 2018?", "2018-12-31T23:59:59.999999+00:00"),
    ("I used to play chess in 2015, right?", "2015-12-31T23:59:59.999999+00:00"),
    ("where did my sister work in 2020?", "2020-12-31T23:59:59.999999+00:00"),
    ("who did I work for 3 years ago?", "2021-12-31T23:59:59.999999+00:00"),
    ("was I married in 2019?", "2019-12-31T23:59:59.999999+00:00"),
    ("what was Alice's address before 2020?", "2019-12-31T23:59:59.999999+00:00"),
    ("remind me where I lived in 2019", "2019-12-31T23:59:59.999999+00:00"),
]


@pytest.mark.parametrize(("question", "instant"), HELD)
def test_a_question_about_what_held_then_is_read_at_the_end_of_its_window(question: str, instant: str) -> None:
    held = question_as_of(question, question_window(question, AT), AT)
    assert held is not None and held.at.isoformat() == instant
    assert held.reason.startswith('the question asks what held "')


EVENTS = [
    "what happened in 2019?",
    "what did I do last week?",
    "where did I go in March 2023?",
    "what did I buy back in 2019?",
    "what did I work on last week?",
    "did I work out yesterday?",
    "what did I have for dinner yesterday?",
    "how was my trip last week?",
    "when did I move in 2019?",
    "what did I do when I lived in Boston in 2019?",
    "I was used to it by 2019",
    "I'm used to it since last year",
    "did you have any luck finding a hotel last week?",
]


@pytest.mark.parametrize("question", EVENTS)
def test_an_event_question_is_not_read_as_of_its_window(question: str) -> None:
    assert not asks_what_held(question)
    assert question_as_of(question, question_window(question, AT), AT) is None


@pytest.mark.parametrize(
    "question",
    [
        "where did I live?",  # no window: now
        "where did I live this year?",  # the window runs past the question
        "where have I lived since 2020?",  # runs to the question's time
        "where did I live next year?",  # a plan: no window
    ],
)
def test_a_state_question_without_a_window_wholly_before_it_is_read_now(question: str) -> None:
    assert asks_what_held(question)
    assert question_as_of(question, question_window(question, AT), AT) is None


def test_a_naive_question_time_is_utc() -> None:
    naive = AT.replace(tzinfo=None)
    held = question_as_of("where did I live in 2019?", question_window("where did I live in 2019?", naive), naive)
    assert held is not None and held.at == datetime(2019, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_the_option_is_a_bool() -> None:
    assert RecallOptions().as_of_from_question is True
    assert RecallOptions().with_overrides({"as_of_from_question": False}).as_of_from_question is False
    with pytest.raises(ArgumentTypeError, match="as_of_from_question must be True or False"):
        RecallOptions(as_of_from_question=1)  # type: ignore[arg-type]
