"""A question that asks what held at a past time, read as of that time (pure).

`question_as_of("where did I live in 2019?", window, at)` is 2019-12-31T23:59:59.999999: recall
then reads memory as it held then (valid time), as an explicit `as_of` would, so a fact that
holds now but began after 2019 leaves every list and one that held at the end of 2019 is live
for every list. It applies only when both hold:

- the question asks for a state, not an event (`asks_what_held`): "as of ..."; "used to";
  "did <someone> live / reside / work / have / own / use / rent / date / belong" (not "did you",
  the assistant's own doings: "did you have any luck ..."); "was / were <someone> living /
  residing / working / staying / renting / dating / using / married / single / engaged /
  employed / unemployed / retired"; "what / who / where / which (...) was / were my / our /
  your / his / her / their / <name>'s ..."; "lived", "resided", "owned", "rented", "worked at /
  for / as". Not with "happen", "went" or "did <someone> do", nor "work on / out" or "have for /
  to" (what was done, not what held). "back in" alone is no sign ("what did I buy back in
  2019?" asks for an event): events are left to the date list, which already brings what began
  in the window.
- the window the question names (`recall.dates.question_window`) ends by the question's time:
  a window still running ("this year", "since 2020") asks about now, which is how it is read.

A fact stored with the time it was told as its start, not the time it began, is not live before
it was told: read as of 2019 it is missing. For such memories `RecallOptions.as_of_from_question`
=False keeps reading at the question's time (the date list still brings what ended since).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memsoda_core.recall.dates import Window

_SOMEONE = r"(?:[\w']+\s+){1,3}?"
"""Who the question is about: "I ", "my sister ", "Alice and Bob "."""

_STATE = re.compile(
    "|".join(
        (
            r"\bas\s+of\b",
            r"(?<!\bwas\s)(?<!\bwere\s)(?<!\bis\s)(?<!\bare\s)(?<!\bam\s)(?<!'m\s)(?<!'re\s)(?<!\bget\s)"
            r"(?<!\bgot\s)\bused\s+to\b",  # not "was used to pay", "I'm used to it"
            r"\bdid\s+(?!you\b)" + _SOMEONE + r"(?:live|reside|work(?!\s+(?:on|out)\b)|have(?!\s+(?:for|to)\b)"
            r"|own|use|rent|date|belong)\b",
            r"\b(?:was|were)\s+" + _SOMEONE + r"(?:living|residing|working(?!\s+(?:on|out)\b)|staying|renting"
            r"|dating|using|married|single|engaged|employed|unemployed|retired)\b",
            r"\b(?:what|who|where|which)\b(?:\s+\w+)?\s+(?:was|were)\s+(?:my|our|your|his|her|their|\w+'s)\s",
            r"\b(?:lived|resided|owned|rented)\b",
            r"\bworked\s+(?:at|for|as)\b",
        )
    ),
    re.IGNORECASE,
)
_EVENT = re.compile(r"\bhappen(?:s|ed|ing)?\b|\bwent\b|\bdid\s+" + _SOMEONE + r"do\b", re.IGNORECASE)


def asks_what_held(text: str) -> bool:
    """`text` asks what held (a state), not what happened (see the module docstring)."""
    return _STATE.search(text) is not None and _EVENT.search(text) is None


@dataclass(frozen=True, kw_only=True)
class HeldAt:
    """The valid time a question asks about, and why."""

    at: datetime
    reason: str


def question_as_of(text: str | None, window: Window | None, at: datetime) -> HeldAt | None:
    """The time to read memory at for `text`, whose window (`question_window(text, at)`) is
    `window`, asked at `at`; None when it does not clearly ask what held before `at`."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if not text or window is None or window.end > at or not asks_what_held(text):
        return None
    # the window's last instant: the latest state in it; the date list still brings what held earlier in it
    instant = window.end - timedelta(microseconds=1)
    return HeldAt(
        at=instant,
        reason=f'the question asks what held "{window.said}": read as of {instant.isoformat()}, the end of that window',
    )
