"""What `Memory` and `AsyncMemory` share above the runner: argument checks and operation building."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np

from memsoda_core import ops
from memsoda_core.embedders import Embedder, check_vectors
from memsoda_core.embedders.choice import EXPLICIT, build, choose
from memsoda_core.embedders.openai import OpenAIEmbedder
from memsoda_core.errors import (
    ConfigurationError,
    EmbeddingError,
    LimitError,
    ReadOnlyStoreError,
    ValidationError,
)
from memsoda_core.forgetting import retention as retention_ops
from memsoda_core.forgetting.operations import forget as forget_scope
from memsoda_core.forgetting.operations import forget_source
from memsoda_core.forgetting.rules import ForgetReport, RetentionReport, RetentionRule, check_retention, check_source
from memsoda_core.layouts import generation
from memsoda_core.learning.applying import Applied, apply_extraction, fact_sources
from memsoda_core.learning.call import RememberCall
from memsoda_core.learning.extractors import Extractor
from memsoda_core.learning.operations import CheckedExtraction
from memsoda_core.models import (
    EpisodeInput,
    Fact,
    FactInput,
    FactPage,
    FactSource,
    ImportReport,
    IncludeOption,
    RecallResult,
)
from memsoda_core.ops.opening import recorded_space
from memsoda_core.ops.reading import check_list_args, check_predicates
from memsoda_core.ops.transfer import ImportCounts, ImportedEpisode
from memsoda_core.options import DEFAULT_OPTIONS, RecallOptions
from memsoda_core.recall.operation import recall as recall_operation
from memsoda_core.recall.planning import ScopeSizes
from memsoda_core.recall.profile import MAX_FACTS as MAX_PROFILE_FACTS
from memsoda_core.recall.profile import Profile
from memsoda_core.recall.profile import profile as standing_profile
from memsoda_core.recall.signals.conversation import check_conversation
from memsoda_core.runner.embedding import check_embedder
from memsoda_core.runner.once import run_once
from memsoda_core.runner.steps import Operation
from memsoda_core.runner.target import Target, check_schema_name, release_target, resolve_target
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.layout import LAYOUTS
from memsoda_core.synthesis import Synthesizer
from memsoda_core.validation import (
    Scope,
    ValidFact,
    check_entity_name,
    check_optional_scope,
    check_query,
    check_scope,
    parse_time,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)


INCLUDE_OPTIONS: frozenset[str] = frozenset({"raw", "episodes", "synthesis"})


@dataclass(frozen=True, kw_only=True)
class ParsedImport:
    """A validated JSONL file, ready to write."""

    scope: Scope
    facts: list[ValidFact]
    episodes: list[ImportedEpisode]
    errors: list[tuple[int, str]]

    @property
    def total(self) -> int:
        return len(self.facts) + len(self.episodes)

    def report(self, counts: ImportCounts) -> ImportReport:
        return ImportReport(
            facts=len(self.facts),
            episodes=len(self.episodes),
            skipped=len(self.errors),
            errors=tuple(self.errors),
            facts_new=counts.facts_new,
            facts_merged=counts.facts_merged,
            episodes_new=counts.episodes_new,
            episodes_present=counts.episodes_present,
        )


class MemoryBase:
    """State and operation builders shared by Memory and AsyncMemory."""

    _info: StoreInfo
    _embedder: Embedder
    _options: RecallOptions
    _synthesizer: Synthesizer | None
    _extractor: Extractor | None
    _target: Target
    _built_embedder = False
    _layout_due = 0.0
    """When the next operation reads the store's layout generation (`layouts.generation`)."""

    def _setup(
        self,
        *,
        info: StoreInfo,
        embedder: Embedder,
        options: RecallOptions | None,
        synthesizer: Synthesizer | None,
        target: Target,
        extractor: Extractor | None = None,
    ) -> None:
        self._info = info
        self._embedder = embedder
        self._options = options or DEFAULT_OPTIONS
        self._synthesizer = synthesizer
        self._extractor = extractor
        self._scope_sizes = ScopeSizes()
        self._target = target
        self._layout_due = time.monotonic() + generation.CHECK_EVERY_S  # the open has just read it

    @property
    def options(self) -> RecallOptions:
        """Default recall options of this memory (frozen; pass `options=` to recall for variants)."""
        return self._options

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def dsn(self) -> str:
        """The connection string in use (the embedded server's socket URI when embedded)."""
        return self._target.dsn

    @property
    def info(self) -> StoreInfo:
        """Schema name, embedding model and dimension of the open store."""
        return self._info

    @property
    def read_only(self) -> bool:
        """Open for reads only: `open(read_only=True)`, or detected on a read-only session (a hot
        standby, a read replica, a `default_transaction_read_only` role). An up-to-date store opens
        so without writing; recall, get/list/history, sources, stats, items' get and search and
        export are served, and every write raises `ReadOnlyStoreError` before anything is sent."""
        return self._info.read_only

    def _check_writable(self, what: str) -> None:
        """Refuse a write before anything is sent when the store is open read-only."""
        if self._info.read_only:
            raise ReadOnlyStoreError(
                f"{what} writes, and this store is open read-only (read_only=True, or a read-only "
                "session: a hot standby, a read replica, a read-only role); write through a memory "
                "opened read-write on the primary"
            )

    @staticmethod
    def _now() -> datetime:
        return datetime.now(UTC)

    # Operation builders: validate arguments here, eagerly, so bad input raises at the call.

    def _resizing(self, scope: Scope, op: Operation[T]) -> Operation[T]:
        """`op`, a write that changes how many facts `scope` holds; its remembered size is dropped
        once the write is done (see `scope_sizes`)."""
        result = yield from op
        self._scope_sizes.forget(scope)
        return result

    def _add_facts_op(
        self,
        facts: Sequence[FactInput | Mapping[str, Any]],
        dataset: str,
        project: str,
        vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None,
    ) -> Operation[list[int]]:
        scope = check_scope(dataset, project)
        return self._resizing(scope, ops.add_facts(self._info, scope, facts, vectors=vectors))

    def _invalidate_op(self, fact_id: int, dataset: str, project: str, at: Any) -> Operation[bool]:
        return ops.invalidate(self._info, check_scope(dataset, project), fact_id, at=at)

    def _supersede_op(
        self, fact_id: int, new_fact: FactInput | Mapping[str, Any], dataset: str, project: str
    ) -> Operation[int]:
        scope = check_scope(dataset, project)
        return self._resizing(scope, ops.supersede(self._info, scope, fact_id, new_fact))

    def _add_episodes_op(
        self, episodes: Sequence[EpisodeInput | Mapping[str, Any]], dataset: str, project: str
    ) -> Operation[list[int]]:
        return ops.add_episodes(self._info, check_scope(dataset, project), episodes, now=self._now())

    def _forget_op(self, dataset: str, project: str, entity: str | None) -> Operation[int]:
        scope = check_scope(dataset, project)
        name = None if entity is None else check_entity_name(entity)
        return self._resizing(scope, forget_scope(self._info, scope, name))

    def _forget_source_op(
        self, dataset: str, project: str, thread_id: Any, message_ids: Any
    ) -> Operation[ForgetReport]:
        scope = check_scope(dataset, project)
        source = check_source(thread_id, message_ids)
        return self._resizing(scope, forget_source(self._info, scope, source))

    def _remember_call(
        self, messages: Any, dataset: str, project: str, *, extractor: Any, **settings: Any
    ) -> RememberCall:
        self._check_writable("remember")  # before the model is called
        chosen = extractor if extractor is not None else self._extractor
        return RememberCall.check(
            messages, dataset=dataset, project=project, extractor=chosen, now=self._now(), **settings
        )

    def _related_op(self, call: RememberCall) -> Operation[RecallResult]:
        """The live facts recall finds for the window (none when `related` is 0)."""
        if not call.related:
            return _nothing_related()
        return self._top_facts_op(call.scope, call.query(), call.related)

    def _top_facts_op(self, scope: Scope, query: str | None, keep: int) -> Operation[RecallResult]:
        """A recall with this memory's options but `keep` facts kept: what `remember` shows its
        extractor and what an item search maps back to items."""
        return self._recall_op(
            query,
            dataset=scope.dataset,
            project=scope.project,
            include=(),
            query_embedding=None,
            as_of=None,
            options=None,
            overrides={"facts_in_context": keep},
        )

    def _apply_extraction_op(self, call: RememberCall, checked: CheckedExtraction) -> Operation[Applied]:
        op = apply_extraction(self._info, call.scope, checked, thread_id=call.thread_id, episode=call.episode(checked))
        return self._resizing(call.scope, op)

    def _sources_op(self, fact_id: int, dataset: str, project: str) -> Operation[list[FactSource]]:
        return fact_sources(self._info, check_scope(dataset, project), fact_id)

    def _get_fact_op(self, fact_id: int, dataset: str, project: str) -> Operation[Fact]:
        return ops.get_fact(self._info, check_scope(dataset, project), fact_id)

    def _list_facts_op(
        self, dataset: str, project: str, as_of: Any, known_at: Any, **filters: Any
    ) -> Operation[FactPage]:
        scope = check_scope(dataset, project)
        checked = check_list_args(**filters)
        known, when = check_times(as_of, known_at)
        return ops.list_facts(self._info, scope, checked, when or self._now(), known)

    def _history_op(self, fact_id: int, dataset: str, project: str) -> Operation[list[Fact]]:
        return ops.history(self._info, check_scope(dataset, project), fact_id)

    def _set_single_valued_op(
        self, predicates: Sequence[str], dataset: str, project: str, single_valued: Any
    ) -> Operation[list[str]]:
        scope = check_scope(dataset, project)
        if not isinstance(single_valued, bool):
            raise ValidationError(f"single_valued must be True or False, got {single_valued!r}")
        return ops.set_single_valued(self._info, scope, check_predicates(predicates), single_valued)

    def _single_valued_op(self, dataset: str, project: str) -> Operation[list[str]]:
        return ops.single_valued_predicates(self._info, check_scope(dataset, project))

    def _recall_op(
        self,
        query: str | None,
        *,
        dataset: str,
        project: str,
        include: Iterable[str],
        query_embedding: Sequence[float] | None,
        as_of: Any,
        options: RecallOptions | None,
        overrides: dict[str, Any],
        known_at: Any = None,
        conversation: Any = None,
        exclude: Any = (),
    ) -> Operation[RecallResult]:
        scope = check_scope(dataset, project)
        text = check_query(query)
        turns = check_conversation(conversation)
        excluded = check_fact_ids(exclude, "exclude")
        chosen = (options or self._options).with_overrides({k: v for k, v in overrides.items() if v is not None})
        if isinstance(include, str):
            include = (include,)
        wanted = frozenset(include)
        unknown = sorted(wanted - INCLUDE_OPTIONS)
        if unknown:
            raise ValidationError(f"unknown include option(s) {unknown}; use any of {sorted(INCLUDE_OPTIONS)}")
        if "synthesis" in wanted and self._synthesizer is None:
            raise ConfigurationError("include=['synthesis'] needs Memory.open(synthesizer=...)")
        vector = None
        if query_embedding is not None:
            try:
                vector = check_vectors([query_embedding], count=1, dimensions=self._info.dimensions)[0]
            except EmbeddingError as exc:
                raise ValidationError(f"query_embedding is not usable: {exc}") from None
        known, when = check_times(as_of, known_at)
        typed: frozenset[IncludeOption] = wanted  # type: ignore[assignment]
        return recall_operation(
            self._info,
            scope,
            text,
            options=chosen,
            include=typed,
            query_embedding=vector,
            as_of=when,
            now=self._now(),
            scope_sizes=self._scope_sizes,
            known_at=known,
            conversation=turns,
            exclude=excluded,
        )

    def _profile_op(
        self, dataset: str, project: str, subject: Any, max_facts: Any, min_confidence: Any
    ) -> Operation[Profile]:
        scope = check_scope(dataset, project)
        name = check_entity_name(subject)
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or not 1 <= max_facts <= MAX_PROFILE_FACTS:
            raise LimitError(f"max_facts must be an int between 1 and {MAX_PROFILE_FACTS}, got {max_facts!r}")
        floor = self._options.min_confidence if min_confidence is None else min_confidence
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 <= floor <= 1.0:
            raise ValidationError(f"min_confidence must be a number between 0 and 1, got {min_confidence!r}")
        return standing_profile(
            self._info, scope, subject=name, max_facts=max_facts, min_confidence=float(floor), at=self._now()
        )

    def _parse_import(self, lines: Sequence[str], dataset: str, project: str, on_error: str) -> ParsedImport:
        self._check_writable("import_jsonl")
        scope = check_scope(dataset, project)
        facts, episodes, errors = ops.parse_jsonl(lines, now=self._now(), on_error=on_error)
        return ParsedImport(scope=scope, facts=facts, episodes=episodes, errors=errors)

    def _import_op(
        self,
        parsed: ParsedImport,
        batch_size: int,
        rebuild_index: bool | None,
    ) -> Operation[ImportCounts]:
        return self._resizing(
            parsed.scope,
            ops.import_records(
                self._info,
                parsed.scope,
                parsed.facts,
                parsed.episodes,
                batch_size=batch_size,
                rebuild_index=rebuild_index,
            ),
        )

    def _restore_indexes_op(self, parsed: ParsedImport) -> Operation[list[str]]:
        """After a failed import: build the scope's indexes it may have set aside."""
        return ops.ensure_tenant_indexes(self._info, parsed.scope)

    def _stats_op(self, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
        return ops.stats(self._info, *check_optional_scope(dataset, project))

    def _maintain_op(self, retention: Any = True) -> Operation[list[str]]:
        if not isinstance(retention, bool):
            raise ValidationError(f"retention must be True or False, got {retention!r}")
        return self._maintaining(retention)

    def _maintaining(self, retention: bool) -> Operation[list[str]]:
        if retention:
            yield from self._apply_retention_op(None)
        return (yield from ops.maintain(self._info))

    def _set_retention_op(
        self, dataset: str, project: str, max_age: Any, purge: Any, predicate: Any
    ) -> Operation[list[RetentionRule]]:
        scope = check_scope(dataset, project)
        age, chosen, folded = check_retention(max_age, purge, predicate)
        return retention_ops.set_retention(self._info, scope, max_age=age, purge=chosen, predicate=folded)

    def _retention_op(self, dataset: str, project: str) -> Operation[list[RetentionRule]]:
        return retention_ops.retention_rules(self._info, check_scope(dataset, project))

    def _apply_retention_op(self, at: Any) -> Operation[RetentionReport]:
        return self._purging(retention_ops.apply_retention(self._info, parse_time(at, "at")))

    def _purging(self, op: Operation[RetentionReport]) -> Operation[RetentionReport]:
        """`op`, whose purged scopes' remembered sizes are dropped once it is done."""
        report = yield from op
        for dataset, project, _ in report.scopes:
            self._scope_sizes.forget(Scope(dataset=dataset, project=project))
        return report

    def _export_op(self, dataset: str, project: str) -> Operation[int]:
        return ops.export_jsonl(self._info, check_scope(dataset, project))


def _nothing_related() -> Operation[RecallResult]:
    return RecallResult(context="", facts=(), entities=())
    yield  # an operation with no requests


def check_fact_ids(ids: Any, name: str) -> frozenset[int]:
    """A collection of fact ids (ints), as a frozenset."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise ValidationError(f"{name} must be a collection of fact ids (ints), got {type(ids).__name__}")
    checked = list(ids)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in checked):
        raise ValidationError(f"{name} must hold fact ids (ints) only")
    return frozenset(checked)


def check_times(as_of: Any, known_at: Any) -> tuple[datetime | None, datetime | None]:
    """(known_at, as_of) of a read: transaction time and valid time, each None when not given;
    `as_of` defaults to `known_at` ("what memory held true at T, as it knew it then")."""
    known = parse_time(known_at, "known_at")
    when = parse_time(as_of, "as_of")
    return known, when if when is not None else known


def check_open_args(schema: str, tenant_index_min_facts: int | None, layout: str | None) -> str:
    """`open`'s store settings checked before anything starts; returns the checked schema name."""
    if layout is not None and layout not in LAYOUTS:
        raise ConfigurationError(f"layout must be one of {', '.join(LAYOUTS)} or None, got {layout!r}")
    if tenant_index_min_facts is not None:
        if isinstance(tenant_index_min_facts, bool) or not isinstance(tenant_index_min_facts, int):
            raise ConfigurationError("tenant_index_min_facts must be an int or None")
        if tenant_index_min_facts < 1:
            raise ConfigurationError("tenant_index_min_facts must be at least 1")
    return check_schema_name(schema)


def open_args(
    embedder: Embedder | None,
    dsn: str | None,
    home: str | os.PathLike[str] | None,
    schema: str,
    text_search_config: str,
    tenant_index_min_facts: int | None,
    layout: str | None = None,
) -> tuple[Target, dict[str, Any]]:
    """The settings checked, the store's target (`runner.target.resolve_target`; released again
    if this fails), the embedder (`embedder`, else the one `embedders.choice.choose` picks for
    the store, whose recorded model is read first) and the arguments of `ops.open_store` for it.
    The vector size comes from the store or a known model where it can, else from the embedder
    (the local model loads here, so never under a recall's timeout)."""
    checked = check_open_args(schema, tenant_index_min_facts, layout)
    target = resolve_target(dsn, home)
    try:
        if embedder is not None:
            chosen, origin = check_embedder(embedder), EXPLICIT
        else:
            # An existing store's recorded model wins over the environment's default.
            choice = choose(run_once(target.dsn, recorded_space(checked)))
            assert choice.spec is not None
            chosen, origin = build(choice.spec, dimensions=choice.dimensions), choice.origin
        return target, {
            "embedder": chosen,
            "op": {
                "schema": checked,
                "model": str(chosen.model),
                "dimensions": int(chosen.dimensions),
                "text_search_config": text_search_config,
                "tenant_index_min_facts": tenant_index_min_facts,
                "layout": layout,
                "origin": origin,
            },
        }
    except BaseException:
        release_target(target)
        raise


def close_built(embedder: Embedder | None) -> None:
    """Close the HTTP client of an OpenAI embedder `open` built (the caller closes its own)."""
    if isinstance(embedder, OpenAIEmbedder):
        embedder.close()


async def aclose_built(embedder: Embedder | None) -> None:
    """`close_built` for an AsyncMemory (both clients; the sync code calls `close_built`)."""
    if isinstance(embedder, OpenAIEmbedder):
        await embedder.aclose()


def check_read_only(read_only: Any) -> bool:
    if not isinstance(read_only, bool):
        raise ConfigurationError(f"read_only must be True or False, got {type(read_only).__name__}")
    return read_only


IMPORT_ON_ERROR = ("raise", "skip")


def check_import_args(on_error: str, batch_size: int, rebuild_index: bool | None) -> None:
    if rebuild_index is not None and not isinstance(rebuild_index, bool):
        raise ValidationError(f"rebuild_index must be True, False or None, got {rebuild_index!r}")
    if on_error not in IMPORT_ON_ERROR:
        raise ValidationError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not 1 <= batch_size <= 10_000:
        raise ValidationError(f"batch_size must be between 1 and 10000, got {batch_size}")
