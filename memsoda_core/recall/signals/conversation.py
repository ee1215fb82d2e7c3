"""The conversation signal: the facts nearest the recent turns of the conversation the query
comes from (`recall(..., conversation=[...])`), fused as a list of its own.

A follow-up ("ok, let's go on as planned") often says nothing of what it is about; the user's
previous turns do. The last `conversation.turns` (`ConversationOptions`) user messages are embedded together,
the most recent first, so an embedder that truncates a long window drops the oldest words. Without
a conversation the signal does not run and its statement is not sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from psycopg import sql

from memsoda_core.errors import ValidationError
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.models import USER_ROLES
from memsoda_core.option_checks import check_between, check_types
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.signals.live import reads_live
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SignalSpec
from memsoda_core.recall.signals.vector import nearest_cte
from memsoda_core.text import clean_query, message_query


def conversation_cte(
    schema: str, access: ScopeAccess = SHARED, *, known: bool = False, exact: bool = False, within: bool = False
) -> sql.Composed:
    """The facts nearest the conversation's embedding %(conversation_qvec)s, as the vector signal's."""
    return nearest_cte(
        schema,
        "conversation",
        "conversation_qvec",
        "conversation_candidates",
        access,
        known=known,
        exact=exact,
        within=within,
    )


def _ctes(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    return (conversation_cte(schema, access, known=plan.known, exact=reads_live(plan), within=plan.within),)


@dataclass(frozen=True, kw_only=True)
class ConversationOptions:
    """The conversation signal's knobs (`RecallOptions.conversation`)."""

    group: ClassVar[str] = "conversation"
    turns: int = 2
    """With `recall(conversation=...)`: how many of the latest user turns the signal embeds
    together."""
    candidates: int = 50
    """Length of the conversation signal's list."""

    def __post_init__(self) -> None:
        check_types(self, self.group)
        check_between("conversation.turns", self.turns, 1, 20)
        check_between("conversation.candidates", self.candidates, 1, 1000)


def _embeds(request: RecallRequest) -> str | None:
    # beside a query embedding only: without one the recall is degraded to keyword and recency
    if request.query is None or request.embedding is None:
        return None
    return conversation_text(request.conversation, request.query, request.options.conversation.turns)


def _params(request: RecallRequest) -> Mapping[str, Any]:
    params: dict[str, Any] = {"conversation_candidates": request.options.conversation.candidates}
    vector = request.vectors.get("conversation")
    if vector is not None:
        params["conversation_qvec"] = np.asarray(vector, dtype=np.float32)
    return params


def _explain(hit: HitRow) -> str:
    return f"cosine similarity {float(hit.similarity or 0):.3f} to the conversation's recent turns"


SIGNAL = SignalSpec(
    name="conversation",
    statement=2,
    runs=lambda request: "conversation" in request.vectors,
    embeds=_embeds,
    ctes=_ctes,
    details=(("similarity", "1 - distance"),),
    params=_params,
    explain=_explain,
)


def check_conversation(conversation: Any) -> tuple[tuple[str, str], ...] | None:
    """`recall(conversation=...)`: the prior messages, oldest first, each a mapping with a `role`
    and a `content` string -> (role, content) pairs, or None for no conversation. Anything else
    raises ValidationError before any I/O."""
    if conversation is None:
        return None
    if isinstance(conversation, (str, bytes, Mapping)) or not isinstance(conversation, Sequence):
        raise ValidationError("conversation must be a list of {'role': ..., 'content': ...} messages, oldest first")
    turns = []
    for position, message in enumerate(conversation):
        if not isinstance(message, Mapping):
            raise ValidationError(f"conversation[{position}] must be a mapping with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role.strip():
            raise ValidationError(f"conversation[{position}]['role'] must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ValidationError(f"conversation[{position}]['content'] must be a string, got {type(content).__name__}")
        turns.append((role.strip().casefold(), clean_query(content)))
    return tuple(turns)


def conversation_text(turns: Sequence[tuple[str, str]], query: str | None, last: int) -> str | None:
    """The text the signal embeds: the latest `last` user turns before the query, the most recent
    first (an embedder truncating a long window then drops the oldest words), each cut as a query
    is (`text.message_query`); None when there is none. A trailing turn that is the query (equal
    once both are cut: an adapter cuts a long message to its query) is the query itself
    (frameworks pass the history with the current message) and is skipped."""
    said = [content.strip() for role, content in turns if role in USER_ROLES and content.strip()]
    if said and query is not None and message_query(said[-1]) == message_query(query):  # both clean_query'd
        said.pop()
    chosen = [message_query(text) for text in reversed(said[-last:])]
    return "\n\n".join(chosen) if chosen else None
