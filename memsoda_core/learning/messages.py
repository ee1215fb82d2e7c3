"""The chat window `remember` learns from: validated messages, and where a quote occurs in them."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsoda_core import limits
from memsoda_core.errors import LimitError, ValidationError
from memsoda_core.models import Message
from memsoda_core.validation import check_text, parse_time

MAX_MESSAGES = 200
"""Messages in one `remember` window."""

MAX_MESSAGE_CHARS = 20_000


@dataclass(frozen=True, kw_only=True)
class WindowMessage:
    """A checked message: its text, its UTC time (None when not given), its id."""

    position: int
    role: str
    content: str
    timestamp: datetime | None
    id: str | None


def check_messages(messages: Any) -> tuple[WindowMessage, ...]:
    """Messages (Message objects or mappings with role and content/text, optional timestamp and
    id), checked; `ValidationError` names the first bad one."""
    if isinstance(messages, str | Mapping | Message) or not isinstance(messages, Sequence):
        raise ValidationError("messages must be a list of Message objects or dicts with 'role' and 'content'")
    if not messages:
        raise ValidationError("messages must not be empty")
    if len(messages) > MAX_MESSAGES:
        raise LimitError(f"{len(messages)} messages in one window; the limit is {MAX_MESSAGES}")
    return tuple(_check_message(item, position) for position, item in enumerate(messages))


def _check_message(item: Any, position: int) -> WindowMessage:
    where = f"message #{position}"
    role: Any
    content: Any
    message_id: Any
    if isinstance(item, Message):
        role, content, timestamp, message_id = item.role, item.content, item.timestamp, item.id
    elif isinstance(item, Mapping):
        unknown = sorted(set(item) - {"role", "content", "text", "timestamp", "id"})
        if unknown:
            raise ValidationError(f"{where} has unknown field(s) {unknown}")
        role = item.get("role")
        content = item.get("content", item.get("text"))
        timestamp, message_id = item.get("timestamp"), item.get("id")
    else:
        raise ValidationError(f"{where} must be a Message or a dict, got {type(item).__name__}")
    if message_id is not None and not isinstance(message_id, str):
        message_id = str(message_id)
    return WindowMessage(
        position=position,
        role=check_text(role, f"{where} role", 40),
        content=check_text(content, f"{where} content", MAX_MESSAGE_CHARS),
        timestamp=parse_time(timestamp, f"{where} timestamp"),
        id=None if message_id is None else check_text(message_id, f"{where} id", limits.MAX_THREAD_ID_CHARS),
    )


_CLOSED_CLASSES = (
    "i me my mine myself you your yours yourself he him his himself she her hers herself it its itself "
    "we us our ours ourselves they them their theirs themselves this that these those who whom whose "
    "which what a an the some any each every all both no",  # pronouns and determiners
    "in on at to of for from by with about as into onto over under up down out off than via per",  # prepositions
    "and or but nor so if because then",  # conjunctions
    "am is are was were be been being do does did have has had will would shall should can could may "
    "might must not",  # auxiliaries, the copula and negation
    "m s t ll ve d re",  # what contractions leave once folded: i'm, it's, don't, we'll, i've, you'd, you're
)

FUNCTION_WORDS = frozenset(word for group in _CLOSED_CLASSES for word in group.split())
"""The common English closed-class words (pronouns, determiners, prepositions, conjunctions,
auxiliaries), as `_folded` splits them. They occur in nearly any message and state nothing of their own, so a quote
made of them alone neither supports a fact nor tells which message it came from. A closed class is
a fixed list by definition, not one tuned to data; a word of another language is never in it (it
counts as content: the rule only refuses, never guesses)."""


def content_words(text: str) -> frozenset[str]:
    """The words of `text`, folded as quotes are matched (`_folded`), that are not `FUNCTION_WORDS`."""
    return frozenset(_folded(text).split()) - FUNCTION_WORDS


def window_time(messages: Sequence[WindowMessage], now: datetime) -> datetime:
    """The window's time: its last timestamped message's, else `now`."""
    stamped = [m.timestamp for m in messages if m.timestamp is not None]
    return stamped[-1] if stamped else now


def _folded(text: str) -> str:
    """Case, accents' composition, quotes and runs of spaces and punctuation folded, so a quote
    the model copied with other whitespace or typographic quotes still matches."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.translate(str.maketrans("‘’“”", "''\"\""))
    return re.sub(r"[\W_]+", " ", text).strip()


def quoted_message(quote: str, messages: Sequence[WindowMessage]) -> WindowMessage | None:
    """The first message `quote` occurs in (after `_folded`), None when it occurs in none."""
    needle = _folded(quote)
    if not needle:
        return None
    for message in messages:
        if f" {needle} " in f" {_folded(message.content)} ":
            return message
    return None
