"""One `remember` call, checked up front: the window, the scope, the extractor and the settings,
and the pure steps between its reads and its write (shared by Memory and AsyncMemory)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsoda_core import limits
from memsoda_core.checks import check_bool, check_int
from memsoda_core.errors import ConfigurationError, ExtractionError, ValidationError
from memsoda_core.learning.applying import Applied, apply_extraction
from memsoda_core.learning.extractors import Extractor, as_extractor
from memsoda_core.learning.messages import WindowMessage, check_messages, window_time
from memsoda_core.learning.operations import ON_INVALID, CheckedExtraction, check_answer
from memsoda_core.learning.prompt import ExtractionRequest
from memsoda_core.models import USER_ROLES, RecallResult, RememberResult
from memsoda_core.runner.steps import Operation
from memsoda_core.store.info import StoreInfo
from memsoda_core.text import normalize_name
from memsoda_core.validation import Scope, ValidEpisode, check_scope, check_text

MAX_RELATED = limits.MAX_K


@dataclass(frozen=True, kw_only=True)
class Related:
    """What `remember` reads before its model runs: the live facts recall finds for the window,
    and the scope's single-valued predicates (`check_answer` rejects what they cannot order)."""

    found: RecallResult
    single_valued: frozenset[str]


@dataclass(frozen=True, kw_only=True)
class RememberCall:
    scope: Scope
    messages: tuple[WindowMessage, ...]
    extractor: Extractor
    user: str
    thread_id: str | None
    related: int
    summarize: bool
    on_invalid: str
    now: datetime
    """The window's time (its last timestamp, else the call's)."""

    @classmethod
    def check(
        cls,
        messages: Any,
        *,
        dataset: str,
        project: str,
        extractor: Any,
        user: Any,
        thread_id: Any,
        related: Any,
        summarize: Any,
        on_invalid: Any,
        now: datetime,
    ) -> RememberCall:
        chosen = as_extractor(extractor)
        if chosen is None:
            raise ConfigurationError("remember needs an extractor: pass Memory.open(extractor=...) or extractor=")
        check_int(related, "related", low=0, high=MAX_RELATED)
        if on_invalid not in ON_INVALID:
            raise ValidationError(f"on_invalid must be one of {list(ON_INVALID)}, got {on_invalid!r}")
        check_bool(summarize, "summarize")
        window = check_messages(messages)
        return cls(
            scope=check_scope(dataset, project),
            messages=window,
            extractor=chosen,
            user=normalize_name(check_text(user, "user", limits.MAX_NAME_CHARS)),
            thread_id=None if thread_id is None else check_text(thread_id, "thread_id", limits.MAX_THREAD_ID_CHARS),
            related=related,
            summarize=summarize,
            on_invalid=on_invalid,
            now=window_time(window, now),
        )

    def query(self) -> str:
        """What the related facts are recalled by: the user's messages (all of them when the user
        says nothing), their latest part when long. The user states what memory learns; the
        assistant's replies restate it or add noise, and double the query's cost."""
        said = [m.content for m in self.messages if m.role.casefold() in USER_ROLES] or [
            m.content for m in self.messages
        ]
        text = "\n".join(said)
        return text[-limits.MAX_QUERY_CHARS :]

    def request(self, related: Related) -> ExtractionRequest:
        shown = tuple(sorted((scored.fact for scored in related.found.facts), key=lambda fact: fact.id))
        return ExtractionRequest(
            messages=self.messages, facts=shown, user=self.user, now=self.now, summarize=self.summarize
        )

    def answer(self, raw: Any, request: ExtractionRequest, related: Related) -> CheckedExtraction:
        """The extractor's answer checked (`learning.operations.check_answer`)."""
        return check_answer(
            raw,
            messages=self.messages,
            shown=request.facts,
            user=self.user,
            now=self.now,
            on_invalid=self.on_invalid,
            single_valued=related.single_valued,
        )

    def episode(self, checked: CheckedExtraction) -> ValidEpisode | None:
        if not self.summarize or checked.summary is None:
            return None
        text = check_text(checked.summary, "summary", limits.MAX_EPISODE_CHARS)
        return ValidEpisode(text=text, thread_id=self.thread_id, created_at=self.now)

    def apply(self, info: StoreInfo, checked: CheckedExtraction) -> Operation[Applied]:
        """The write of `checked`: one transaction, with its sources and the window's episode."""
        return apply_extraction(
            info,
            self.scope,
            checked,
            thread_id=self.thread_id,
            episode=self.episode(checked),
            on_invalid=self.on_invalid,
        )

    @staticmethod
    def result(request: ExtractionRequest, checked: CheckedExtraction, applied: Applied) -> RememberResult:
        return RememberResult(
            added=applied.added,
            superseded=applied.superseded,
            ended=applied.ended,
            rejected=tuple(sorted(checked.rejected + applied.rejected, key=lambda r: r.index)),
            shown=tuple(fact.id for fact in request.facts),
            episode_id=applied.episode_id,
        )


def extraction_failed(extractor: Extractor, exc: Exception) -> ExtractionError:
    """The error `remember` raises for an extractor that raised or timed out."""
    return ExtractionError(f"the extractor {type(extractor).__name__} failed: {type(exc).__name__}: {exc}")
