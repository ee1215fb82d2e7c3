"""A fact as one line of text: the form the context block, the prompt of `remember`, the agent tools
and the command line all show (pure)."""

from __future__ import annotations

from datetime import datetime

from memsoda_core.models import Fact
from memsoda_core.text import collapse_line


def day(value: datetime) -> str:
    """A day as rendered: `strftime("%Y-%m-%d")`, whose year has no leading zeros (`isoformat`, the
    common case's cheaper form, pads it to four digits)."""
    return value.date().isoformat() if value.year >= 1000 else value.strftime("%Y-%m-%d")


def day_or_present(value: datetime | None) -> str:
    """A day as rendered, `present` for an end not reached."""
    return "present" if value is None else day(value)


UNKNOWN_START = "unknown"
"""How a fact with no known start shows its start."""


def start_day(value: datetime | None) -> str:
    """A fact's start as rendered: its day, or `UNKNOWN_START`."""
    return UNKNOWN_START if value is None else day(value)


def validity(fact: Fact) -> str:
    """`<start> – <end>` as the block shows it (`unknown` start, `present` end); the one form the
    prompt of `remember` and the agent tools show too."""
    return f"{start_day(fact.valid_at)} – {day_or_present(fact.invalid_at)}"


def fact_text(fact: Fact) -> str:
    """A fact as one line of a block shows it, without the bullet."""
    text = collapse_line(f"{fact.subject} {fact.predicate} {fact.object}")
    return f"{text}  (valid: {validity(fact)})"
