# Generated from memsoda_core/async_memory.py by tools/async_to_sync.py: do not edit, edit the source and run it.
"""`Memory`: long-term memory of facts in PostgreSQL + pgvector, for synchronous code.

The public API over the runner: each method checks its arguments, builds its operation (a
builder beside its capability: `recall.calls`, `items.calls`, `forgetting.calls`, `ops.calls`,
reading the memory's `MemoryContext`) and has the runner perform it. `Memory` is generated from this module by
`tools/async_to_sync.py`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from types import TracebackType
from typing import Any, TextIO, TypeVar

import numpy as np

from memsoda_core.checks import CONFIGURATION, check_bool
from memsoda_core.embedders import Embedder
from memsoda_core.errors import (
    LayoutChangedError,
    MemsodaError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)
from memsoda_core.files import open_sink, progress_callback, read_jsonl
from memsoda_core.forgetting import calls as forgetting_calls
from memsoda_core.forgetting.rules import ForgetReport, MaintainReport, RetentionReport, RetentionRule
from memsoda_core.items import calls as items_calls
from memsoda_core.items.values import ItemInput, StoredItem
from memsoda_core.layouts import generation
from memsoda_core.learning.applying import Applied, SingleValuedChanged, fact_sources
from memsoda_core.learning.call import RememberCall, extraction_failed
from memsoda_core.learning.extractors import ExtractorLike, as_extractor
from memsoda_core.learning.operations import CheckedExtraction
from memsoda_core.memory_context import MemoryContext
from memsoda_core.models import (
    EpisodeInput,
    Fact,
    FactInput,
    FactPage,
    FactSource,
    ImportReport,
    Message,
    RecallResult,
    RememberResult,
    TimeInput,
)
from memsoda_core.ops import calls as fact_calls
from memsoda_core.ops.open_settings import close_built, open_settings
from memsoda_core.ops.opening import open_store, reload_layout
from memsoda_core.ops.transfer import parse_jsonl
from memsoda_core.option_checks import check_options_type
from memsoda_core.options import DEFAULT_OPTIONS, RecallOptions
from memsoda_core.recall import calls as recall_calls
from memsoda_core.recall.profile import DEFAULT_MAX_FACTS as DEFAULT_PROFILE_FACTS
from memsoda_core.recall.profile import Profile
from memsoda_core.reembed import operation as reembed_ops
from memsoda_core.reembed.operation import DEFAULT_BATCH_SIZE, ReembedReport
from memsoda_core.reembed.sync_api import reembed_store
from memsoda_core.runner.policy import check_pool_args
from memsoda_core.runner.steps import Operation
from memsoda_core.runner.sync_runner import Advance, Runner, Sink
from memsoda_core.runner.target import Target, release_target
from memsoda_core.store.info import StoreInfo
from memsoda_core.synthesis import SynthesizerLike, as_synthesizer
from memsoda_core.validation import check_scope

T = TypeVar("T")

REMEMBER_RECHECKS = 3
"""Writes of one `remember` answer, each after a `set_single_valued` that changed what it checked."""


class _EmittedLines:
    """A sink that counts what it passed on: an operation that wrote lines cannot run again."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self.count = 0

    def write(self, lines: Sequence[str]) -> None:
        self._sink(lines)
        self.count += len(lines)


class _FurthestProgress:
    """Progress that shows the furthest point any run reached: an operation run again after a
    rollback counts from zero, and its first items are not shown twice."""

    def __init__(self, advance: Advance) -> None:
        self._advance = advance
        self._shown = 0
        self._done = 0

    def restart(self) -> None:
        """A new run of the operation begins (the previous one was rolled back)."""
        self._done = 0

    def add(self, done: int) -> None:
        self._done += done
        if self._done > self._shown:
            self._advance(self._done - self._shown)
            self._shown = self._done


class Memory:
    """Long-term memory of facts in PostgreSQL + pgvector. Open with `Memory.open()`."""

    _runner: Runner
    _context: MemoryContext
    """What the operation builders read; replaced when the store's info changes, so a builder
    reads it when it builds (`self._run(lambda: ...)` for a write that may be rerun)."""
    _embedder: Embedder
    _target: Target
    _built_embedder = False
    _layout_due = 0.0
    _closed = False
    """When the next operation reads the store's layout generation (`layouts.generation`)."""

    @classmethod
    def open(
        cls,
        dsn: str | None = None,
        embedder: Embedder | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        schema: str = "memsoda",
        options: RecallOptions | None = None,
        synthesizer: SynthesizerLike | None = None,
        extractor: ExtractorLike | None = None,
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        text_search_config: str | None = None,
        cache_size: int = 1024,
        tenant_index_min_facts: int | None = None,
        layout: str | None = None,
        read_only: bool = False,
        worker_reads: bool = True,
    ) -> Memory:
        """Open (creating or upgrading the schema) the store at `dsn`, `MEMSODA_DSN`, or the embedded server
        under `home` / `MEMSODA_HOME`. A `dsn` is a postgresql:// or postgres:// URI or libpq key=value pairs;
        anything else is a `ConfigurationError`. `embedder` defaults to `MEMSODA_EMBEDDER`, else the store's
        model, else `default_embedder()` (`embedders.choice`). A dataset/project gets its own vector and keyword
        indexes once it holds `tenant_index_min_facts` facts (built concurrently by the write that crosses it);
        smaller ones are searched exactly. The threshold is recorded in the store; None uses the recorded one
        (2,000 for a new store). `extractor` is `remember`'s default model (an Extractor, a LangChain chat model
        or a LlamaIndex LLM). `layout`, for a new store: "partitioned" (a large tenant in partitions of its own;
        the default but under Citus) or "plain" (`docs/ARCHITECTURE.md`, "Tenant layouts"). `text_search_config`,
        for a new store: the PostgreSQL text search configuration of its keyword signal (None: english);
        fixed then, so an existing store refuses another one. `read_only`: see `read_only`. `worker_reads`, on
        a Citus store: a small tenant's recall is read straight from the worker holding its shards, which keeps
        its plan (through the coordinator while that worker cannot be reached from here); False sends every
        statement through the coordinator (README, "Running on a Citus cluster")."""
        check_pool_args(pool_size, pool_timeout)
        check_options_type(options, RecallOptions, "Memory.open")
        chosen_synthesizer = as_synthesizer(synthesizer)
        chosen_extractor = as_extractor(extractor)
        settings = (schema, text_search_config, tenant_index_min_facts, layout)
        reads_on_workers = check_bool(worker_reads, "worker_reads", errors=CONFIGURATION)
        opening = open_settings(embedder, dsn, home, *settings)
        target = opening.target
        try:
            runner = Runner.open(
                target,
                open_store(**opening.store, read_only=check_bool(read_only, "read_only", errors=CONFIGURATION)),
                embedder=opening.embedder,
                synthesizer=chosen_synthesizer,
                cache_size=cache_size,
                pool_size=pool_size,
                pool_timeout=pool_timeout,
            )
        except BaseException:
            release_target(target)
            raise
        self = cls()
        self._runner, self._built_embedder = runner, embedder is None
        self._embedder, self._target = runner.embedder, target
        self._context = MemoryContext(
            info=runner.info,
            options=options or DEFAULT_OPTIONS,
            synthesizer=chosen_synthesizer,
            extractor=chosen_extractor,
            worker_reads=reads_on_workers,
        )
        self._layout_due = time.monotonic() + generation.CHECK_EVERY_S  # the open has just read it
        return self

    @property
    def options(self) -> RecallOptions:
        """Default recall options of this memory (frozen; pass `options=` to recall for variants)."""
        return self._context.options

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
        return self._context.info

    @property
    def read_only(self) -> bool:
        """Open for reads only: `open(read_only=True)`, or detected on a read-only session (a hot
        standby, a read replica, a `default_transaction_read_only` role). An up-to-date store opens
        so without writing; recall, get/list/history, sources, stats, items' get and search and
        export are served, and every write raises `ReadOnlyStoreError` before anything is sent."""
        return self._context.info.read_only

    def _check_writable(self, what: str) -> None:
        """Refuse a write before anything is sent when the store is open read-only."""
        self._context.check_writable(what)

    def close(self) -> None:
        """Close the pool (and an embedder `open` built); stop the embedded server if this was its last
        user. Closing again does nothing; an operation after it raises `StoreUnavailableError`."""
        if self._closed:
            return
        self._close_clients()
        self._closed = True
        release_target(self._target)

    def _close_clients(self) -> None:
        """Close the pool and an embedder `open` built."""
        self._runner.close()
        close_built(self._runner.embedder if self._built_embedder else None)

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(
        self,
        op: Operation[T] | Callable[[], Operation[T]],
        *,
        read_only: bool = False,
        snapshot: bool = False,
        sink: Sink | None = None,
        advance: Advance | None = None,
    ) -> T:
        """Have the runner perform `op`, or the operation `op()` builds (see `Runner.run`, which
        also takes `snapshot`, `sink` and `advance`); a write (not `read_only`) is refused at once on a read-only store.

        The store's layout may have changed since the open (`memsoda distribute` in another
        process): its generation is read first (a read of its own, so no transaction is open while
        the operation's model runs; at most once every `generation.CHECK_EVERY_S`, and at once after
        a failed statement), and when it changed, the store's layout is read again and `op()` built
        and run with the new statements (`LayoutChangedError` for an `op` given built, or one that
        already sent lines to `sink`: a second run would write them twice; a second run's progress
        shows past the first's furthest point only)."""
        if self._closed:
            raise StoreUnavailableError("this Memory is closed (close() was called): open a new one")
        emitted = _EmittedLines(sink) if sink is not None else None
        out = emitted.write if emitted is not None else None
        progress = _FurthestProgress(advance) if advance is not None else None
        counted = progress.add if progress is not None else None
        if not read_only:
            self._check_writable("this operation")
        if time.monotonic() >= self._layout_due and self._layout_changed(after_failure=False):
            self._reload_layout()
            if not callable(op):  # built with the old layout
                raise LayoutChangedError(f"the layout of schema {self._context.info.schema!r} changed: run it again")
        try:
            return self._runner.run(op, read_only=read_only, snapshot=snapshot, sink=out, advance=counted)
        except (StoreUnavailableError, StoreBusyError):
            raise  # the server, not the statements
        except StoreError:  # a statement of the old layout may fail on the new one
            if not self._layout_changed():
                raise
        self._reload_layout()
        if not callable(op) or (emitted is not None and emitted.count):  # cannot run again
            raise LayoutChangedError(
                f"the layout of schema {self._context.info.schema!r} changed meanwhile: run it again"
            )
        if progress is not None:
            progress.restart()
        try:
            return self._runner.run(op, read_only=read_only, snapshot=snapshot, sink=out, advance=counted)
        except StoreError as exc:
            if isinstance(exc, (StoreUnavailableError, StoreBusyError)) or not self._layout_changed():
                raise
            raise LayoutChangedError(
                f"the layout of schema {self._context.info.schema!r} changed again: run it again"
            ) from exc

    def _layout_changed(self, *, after_failure: bool = True) -> bool:
        """Whether the store's layout generation is no longer this Memory's (one read of its own).
        Before the operation, its failure is the operation's (a stopped server fails once, fast)."""
        self._layout_due = time.monotonic() + generation.CHECK_EVERY_S
        try:
            current = self._runner.run(generation.current_generation(self._context.info.schema), read_only=True)
        except MemsodaError:
            if not after_failure:
                raise
            return False  # the store is down or busy: the operation's own error says so
        return current != self._context.info.layout_generation

    def _reload_layout(self) -> None:
        """Read the store's layout again and forget what was derived from the old one."""
        info = self._runner.run(reload_layout(self._context.info), read_only=True)
        self._context = replace(self._context, info=info)
        self._context.scope_sizes.forget_all()
        self._layout_due = time.monotonic() + generation.CHECK_EVERY_S

    # --- public API --------------------------------------------------------------------------------

    def add_facts(
        self,
        facts: Sequence[FactInput | Mapping[str, Any]],
        *,
        dataset: str,
        project: str,
        vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None = None,
    ) -> list[int]:
        """Store facts (dicts or FactInput) in one transaction with one embedding call; returns
        their ids in input order. `vectors`, one per fact, are stored as the facts' embeddings
        instead of embedding their texts (entity names are still embedded by the store's
        embedder). Invalid input raises before anything is written.

        Writes reconcile: a fact equal to a live one (same subject, predicate and object, case
        folded) stores nothing and returns the live fact's id, which keeps the higher confidence,
        the earlier valid_at and its source quote (the new one if it had none) and counts the
        repetition (`Fact.times_seen`). A new value of a single-valued relation (`set_single_valued`,
        or `FactInput.single_valued`) ends the live value at its valid_at, superseded by it.

        A fact without valid_at has no known start: it is true for as long as memory knows (live
        at any `as_of` before its end). A new single-valued value without one starts when memory
        learns it, and the value it replaces ends then."""
        return self._run(lambda: fact_calls.add_facts_op(self._context, facts, dataset, project, vectors))

    def invalidate(self, fact_id: int, *, dataset: str, project: str, at: TimeInput | None = None) -> bool:
        """End a live fact's validity at `at` (default now); True. Memory records when it learned
        the end (`Fact.expired_at`). A fact that has ended or was superseded raises `NotLiveError`
        (naming the fact live now in its chain)."""
        return self._run(lambda: fact_calls.invalidate_op(self._context, fact_id, dataset, project, at))

    def supersede(self, fact_id: int, new_fact: FactInput | Mapping[str, Any], *, dataset: str, project: str) -> int:
        """Store `new_fact` and end the live fact `fact_id` at its valid_at (none: now, when memory
        learns it), superseded by it, atomically; returns the new id. `NotLiveError` if `fact_id`
        has ended or was superseded (it names the fact live now in its chain)."""
        return self._run(lambda: fact_calls.supersede_op(self._context, fact_id, new_fact, dataset, project))

    def set_single_valued(
        self, predicates: Sequence[str], *, dataset: str, project: str, single_valued: bool = True
    ) -> list[str]:
        """Declare relations with these predicates (case folded) to hold one value at a time in the
        scope (`single_valued=False` undoes it), for the writes that follow: a new value ends the
        live one. Returns the scope's single-valued predicates."""
        return self._run(
            lambda: fact_calls.set_single_valued_op(self._context, predicates, dataset, project, single_valued)
        )

    def single_valued(self, *, dataset: str, project: str) -> list[str]:
        """The scope's single-valued predicates."""
        return self._run(lambda: fact_calls.single_valued_op(self._context, dataset, project), read_only=True)

    def get_fact(self, fact_id: int, *, dataset: str, project: str) -> Fact:
        """Fact `fact_id` of the scope (live or not); `NotFoundError` if there is none."""
        return self._run(lambda: fact_calls.get_fact_op(self._context, fact_id, dataset, project), read_only=True)

    def list_facts(
        self,
        *,
        dataset: str,
        project: str,
        subject: str | None = None,
        predicate: str | None = None,
        entity: str | None = None,
        status: str = "live",
        as_of: TimeInput | None = None,
        limit: int = 100,
        after: int | None = None,
        known_at: TimeInput | None = None,
    ) -> FactPage:
        """A page of the scope's facts in id order, filtered by subject, predicate, an entity they
        touch, and `status` at `as_of` (default `known_at`, else now): "live", "ended" or "all".
        `known_at` (transaction time): only the facts memory knew then, each as it knew it (an end
        recorded later is left out). Pass the page's `next_after` as `after` for the next page
        (keyset paging)."""
        return self._run(
            lambda: fact_calls.list_facts_op(
                self._context,
                dataset,
                project,
                as_of,
                known_at,
                subject=subject,
                predicate=predicate,
                entity=entity,
                status=status,
                limit=limit,
                after=after,
            ),
            read_only=True,
        )

    def history(self, fact_id: int, *, dataset: str, project: str) -> list[Fact]:
        """The supersede chain of `fact_id` (the facts it replaced and those that replaced it),
        oldest first."""
        return self._run(lambda: fact_calls.history_op(self._context, fact_id, dataset, project), read_only=True)

    def remember(
        self,
        messages: Sequence[Message | Mapping[str, Any]],
        *,
        dataset: str,
        project: str,
        thread_id: str | None = None,
        extractor: ExtractorLike | None = None,
        user: str = "user",
        related: int = 20,
        summarize: bool = False,
        on_invalid: str = "skip",
    ) -> RememberResult:
        """Learn from a window of chat messages: the extractor (this call's, else `open`'s) sees
        them with the `related` live facts recall finds, and proposes facts to add and shown facts
        to supersede or end. Each is checked (quote in a message, only shown facts changed, the
        fact validation of `add_facts`); those that pass are written in one transaction by the
        write rules, with their `sources`; the others are `rejected` (`on_invalid="skip"`) or
        raise `ExtractionError` (`"raise"`), as does a model error: then nothing is written."""
        self._check_writable("remember")  # before the model is called
        settings = {"thread_id": thread_id, "user": user, "related": related, "summarize": summarize}
        chosen = extractor if extractor is not None else self._context.extractor
        now = self._context.now()
        call = RememberCall.check(
            messages, dataset=dataset, project=project, extractor=chosen, on_invalid=on_invalid, now=now, **settings
        )
        before = self._run(lambda: recall_calls.related_op(self._context, call), read_only=True)
        request = call.request(before)
        try:
            raw = call.extractor.extract(request)
        except MemsodaError:
            raise
        except Exception as exc:
            raise extraction_failed(call.extractor, exc) from exc
        checked = call.answer(raw, request, before)
        for _ in range(REMEMBER_RECHECKS):
            try:
                return call.result(request, checked, self._apply_answer(call, checked))
            except SingleValuedChanged as changed:  # declared while the model ran: check as if read now
                checked = call.answer(raw, request, replace(before, single_valued=changed.predicates))
        raise StoreError("the scope's single-valued relations kept changing while remember wrote: call it again")

    def _apply_answer(self, call: RememberCall, checked: CheckedExtraction) -> Applied:
        return self._run(lambda: self._context.growing(call.scope, call.apply(self.info, checked)))

    def sources(self, fact_id: int, *, dataset: str, project: str) -> list[FactSource]:
        """The messages fact `fact_id` was learned from by `remember` (thread and message ids),
        oldest first; empty for a fact written otherwise."""
        return self._run(lambda: fact_sources(self.info, check_scope(dataset, project), fact_id), read_only=True)

    def add_episodes(
        self, episodes: Sequence[EpisodeInput | Mapping[str, Any]], *, dataset: str, project: str
    ) -> list[int]:
        """Store cross-thread episode summaries; returns their ids."""
        return self._run(lambda: fact_calls.add_episodes_op(self._context, episodes, dataset, project))

    def forget(self, *, dataset: str, project: str, entity: str | None = None) -> int:
        """Delete an entity and every fact touching it, or the whole dataset/project when
        `entity` is None. Returns the number of facts deleted."""
        return self._run(lambda: forgetting_calls.forget_op(self._context, dataset, project, entity))

    def forget_source(
        self,
        *,
        dataset: str,
        project: str,
        thread_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> ForgetReport:
        """Forget what `remember` learned from thread `thread_id`, from messages `message_ids`, or
        from those messages of that thread, in one transaction: a fact learned only from them is
        deleted (with the items that refer to it); a fact also learned elsewhere stays and keeps
        its other sources. Forgetting a whole thread deletes its episodes too. A fact that a
        deleted one had superseded keeps its end as history. Returns what went."""
        return self._run(
            lambda: forgetting_calls.forget_source_op(self._context, dataset, project, thread_id, message_ids)
        )

    def maintain(self, *, retention: bool = True) -> MaintainReport:
        """Purge the facts the scopes' retention rules have outlived (`apply_retention`; not with
        `retention=False`), repair single-valued relations whose values overlap in valid time (a
        store written before the single-valued history fix: each value still true when the next
        other value starts ends there, superseded by it, as a write places them), refresh
        statistics and build the tenant indexes of every dataset/project at or above
        `tenant_index_min_facts` facts that lacks them (writes through memsoda do this on their
        own; call it after loading rows with COPY). Returns a `MaintainReport`: the purge, the
        facts ended by the repair, the names of the indexes built."""
        return self._run(lambda: forgetting_calls.maintain_op(self._context, retention))

    def set_retention(
        self,
        *,
        dataset: str,
        project: str,
        max_age: timedelta | None,
        purge: str = "ended",
        predicate: str | None = None,
    ) -> list[RetentionRule]:
        """Keep the scope's facts (of `predicate` alone, case folded, when given: that rule
        overrides the scope's for it) for `max_age`; `max_age=None` removes the rule. `purge`:
        "ended" purges the facts that ended more than `max_age` ago (counted from the later of the
        end and when memory learned of it); "all" purges every fact memory learned more than
        `max_age` ago, live or not. `maintain` / `apply_retention` purge. Returns the scope's rules."""
        return self._run(
            lambda: forgetting_calls.set_retention_op(self._context, dataset, project, max_age, purge, predicate)
        )

    def retention(self, *, dataset: str, project: str) -> list[RetentionRule]:
        """The scope's retention rules: its own (predicate None) first, then by predicate."""
        return self._run(lambda: forgetting_calls.retention_op(self._context, dataset, project), read_only=True)

    def apply_retention(self, *, at: TimeInput | None = None) -> RetentionReport:
        """Purge, in every scope with retention rules, the facts they have outlived at `at`
        (default: now), in one transaction, as `forget_source` deletes facts (their items go too;
        a fact they had superseded keeps its end). Returns what went."""
        return self._run(lambda: forgetting_calls.apply_retention_op(self._context, at))

    def sweep_items(self, *, project: str | None = None, at: TimeInput | None = None) -> int:
        """Delete the items (of `project`, else of every project) whose TTL ran out by `at`
        (default: now), each with the facts it leaves no item referring to, its past texts
        included, in one transaction. Returns how many items went."""
        return self._run(lambda: items_calls.sweep_items_op(self._context, project, at))

    def recall(
        self,
        query: str | None = None,
        *,
        dataset: str,
        project: str,
        facts_in_context: int | None = None,
        min_confidence: float | None = None,
        anchor_vector_top_k: int | None = None,
        anchor_vector_min: float | None = None,
        rrf_k: int | None = None,
        include: Iterable[str] = (),
        query_embedding: Sequence[float] | None = None,
        as_of: TimeInput | None = None,
        options: RecallOptions | None = None,
        known_at: TimeInput | None = None,
        conversation: Sequence[Mapping[str, Any]] | None = None,
        exclude: Iterable[int] = (),
    ) -> RecallResult:
        """The facts that matter for `query`, fused from vector, entity-anchor and keyword signals
        and rendered for a prompt. No query: the most recent live facts. Never raises for an
        embedder failure: the result is then `degraded`. A date the query names ("on 7 May",
        "last week"), resolved against `as_of` or now, adds the facts that held then. `as_of`
        asks what was true then (valid time); `known_at` what memory knew then (transaction
        time), `as_of` defaulting to it. Without either, a question about what held in a past
        window ("where did I live in 2019?") reads as of its end (`RecallResult.as_of`).
        `conversation`: the prior messages, oldest first, each a mapping with `role` and
        `content` (opt-in: the latest user turns add the facts nearest them). `exclude`: fact ids
        not to keep, such as a profile's already in the prompt (`Profile.fact_ids`); the next
        facts take their places."""
        return self._run(
            lambda: recall_calls.recall_op(
                self._context,
                query,
                dataset=dataset,
                project=project,
                include=include,
                query_embedding=query_embedding,
                as_of=as_of,
                known_at=known_at,
                options=options,
                conversation=conversation,
                exclude=exclude,
                overrides={
                    "facts_in_context": facts_in_context,
                    "min_confidence": min_confidence,
                    "anchor.vector_top_k": anchor_vector_top_k,
                    "anchor.vector_min": anchor_vector_min,
                    "rrf_k": rrf_k,
                },
            ),
            read_only=True,
        )

    def profile(
        self,
        *,
        dataset: str,
        project: str,
        subject: str = "user",
        max_facts: int = DEFAULT_PROFILE_FACTS,
        min_confidence: float | None = None,
    ) -> Profile:
        """The standing profile of `subject` for a system prompt: its live facts, single-valued
        relations first, then the most repeated, the most confident, the oldest, cut at
        `max_facts` (the rule: `memsoda_core.recall.profile`), in one read. Its `text` is
        byte-identical from call to call until one of those facts changes, so a prompt cache stays
        warm; pass `fact_ids` to `recall(exclude=...)` so the recall does not repeat them.
        `min_confidence` defaults to the memory's options'."""
        return self._run(
            lambda: recall_calls.profile_op(self._context, dataset, project, subject, max_facts, min_confidence),
            read_only=True,
        )

    def stats(self, *, dataset: str | None = None, project: str | None = None) -> list[dict[str, Any]]:
        """Per scope: facts, live facts, entities, episodes."""
        return self._run(lambda: fact_calls.stats_op(self._context, dataset, project), read_only=True)

    def export_jsonl(self, target: str | os.PathLike[str] | TextIO, *, dataset: str, project: str) -> int:
        """Write the scope's facts, episodes and items as JSON lines (the format: README, "Export and
        import"), read in one snapshot: the store as it was when the export began, whatever is
        written meanwhile; returns the number of lines."""
        scope = check_scope(dataset, project)  # before the file is opened
        with open_sink(target) as sink:
            return self._run(
                lambda: fact_calls.export_op(self._context, scope.dataset, scope.project),
                read_only=True,
                snapshot=True,  # its pages, episodes and items show the store at one instant
                sink=sink.writelines,
            )

    def import_jsonl(
        self,
        source: str | os.PathLike[str] | TextIO,
        *,
        dataset: str,
        project: str,
        on_error: str = "raise",
        batch_size: int = 500,
        progress: bool = False,
        rebuild_index: bool | None = None,
    ) -> ImportReport:
        """Import JSON lines (as written by `export_jsonl`) in one transaction: every line is
        validated first; `on_error="raise"` rejects the file at the first bad line (nothing
        written, `ImportFormatError`), `"skip"` imports the rest and reports bad lines with their
        numbers. A fact line the store's history cannot take (a value of a relation the scope holds
        single-valued starting at the same instant as another of its values, stored or in the
        file) is bad too, found as the facts are written: `"raise"` raises `ImportFormatError`
        naming it (nothing written), `"skip"` leaves it out, with the item lines referring to it.
        An item line replaces the scope's item at its namespace and key, and refers to
        the fact its line's `fact_id` names (the exported id of a fact line above it).

        Into a scope with its own fact HNSW index, `rebuild_index=True` drops it first and builds
        it once after the rows (several times faster than maintaining it row by row, but the
        scope's vector search is exact, so slower, until it is back); `False` keeps it; `None`
        (default) rebuilds when the import brings at least 1/4 as many facts as the scope holds."""
        fact_calls.check_import_args(on_error, batch_size, rebuild_index)
        lines = read_jsonl(source)
        self._check_writable("import_jsonl")
        scope = check_scope(dataset, project)
        parsed = parse_jsonl(lines, now=self._context.now(), on_error=on_error)
        with progress_callback(parsed.total, progress) as advance:
            try:
                counts = self._run(
                    lambda: fact_calls.import_op(self._context, scope, parsed, batch_size, rebuild_index, on_error),
                    advance=advance,
                )
            except Exception:
                with suppress(MemsodaError):  # best effort; the next write or open retries it
                    self._run(lambda: fact_calls.restore_indexes_op(self._context, scope))
                raise
        return parsed.report(counts)

    # --- the embedding model: moved online (`memsoda_core.reembed`) ---------------------------------

    def reembed(
        self, embedder: Embedder, *, batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = False
    ) -> ReembedReport:
        """Re-embed every fact (its anchor-enriched text), entity name and episode with `embedder`,
        then switch the store to its model and dimension in one transaction; items are searched
        through their facts. Recall keeps reading the old vectors until the switch; writes made
        meanwhile (with the old model) are re-embedded before it, the last ones while writers
        wait for the switch. Resumable: after a crash, a kill or an error, calling it again with
        the same model goes on where it stopped, embedding no committed row again. With the
        store already on that model, it does nothing (`switched` False). From the switch on, this
        memory embeds with `embedder`; other processes must reopen the store with it.

        Raises EmbeddingError when the new embedder fails or returns bad vectors (the store stays
        on its model; run it again to resume), ConfigurationError for a bad `batch_size` or
        dimension, LayoutChangedError when another process changed the store's layout (`memsoda
        distribute`) twice during it (once, it resumes with the new layout). `progress` shows a
        bar on stderr."""
        self._context.check_writable("reembed")
        # read now, not when due: a re-embed builds the indexes of the layout it starts with
        if self._layout_changed(after_failure=False):
            self._reload_layout()
        try:
            return self._reembed_once(embedder, batch_size, progress)
        except LayoutChangedError:  # noticed by the switch, which changed nothing
            self._reload_layout()
            return self._reembed_once(embedder, batch_size, progress)  # resumes where it stopped

    def _reembed_once(self, embedder: Embedder, batch_size: int, progress: bool) -> ReembedReport:
        return reembed_store(
            self._runner,
            self._context.info,
            embedder,
            batch_size=batch_size,
            progress=progress,
            switched=self._switched_to,
        )

    def abandon_reembed(self) -> bool:
        """Drop a re-embed in progress (its new vectors, columns and indexes); the store stays on
        its model. False when none was in progress."""
        self._context.check_writable("abandon_reembed")
        return self._run(lambda: reembed_ops.abandon(self._context.info))

    def _switched_to(self, runner: Runner) -> None:
        """From a re-embed's switch on, this memory embeds with `runner`'s embedder into its space."""
        old, built = self._runner.embedder, self._built_embedder
        info = replace(self._context.info, model=runner.info.model, dimensions=runner.info.dimensions)
        self._context = replace(self._context, info=info)
        self._runner = self._runner.with_embedder(runner.embedder, info)
        self._embedder, self._built_embedder = runner.embedder, False
        close_built(old if built else None)

    # --- items: key-addressed JSON documents with searchable text (`memsoda_core.items.values`) --------

    def put_items(
        self, items: Sequence[ItemInput | Mapping[str, Any]], *, dataset: str, project: str
    ) -> list[int | None]:
        """Store, replace or (value None) delete items in one transaction. An item with `text`
        gets a fact "user noted <text>" that recall finds (an equal live fact, if there is one);
        replacing or deleting the item ends the fact (superseded by the new text's) once no item
        refers to it, unless the application wrote it too (`add_facts`, `remember`, an import):
        then it stays. Returns the fact id (or None) of each distinct (namespace, key), in the
        order of their last writes."""
        return self._run(lambda: items_calls.put_items_op(self._context, items, dataset, project))

    def get_item(
        self, namespace: Sequence[str], key: str, *, dataset: str, project: str, refresh_ttl: bool = False
    ) -> StoredItem | None:
        """The item at (`namespace`, `key`) of the scope, or None. `refresh_ttl`: an item with a
        TTL expires that long from now again (not on a read-only memory, which never writes)."""
        get = items_calls.check_get_item(namespace, key, dataset=dataset, project=project, refresh_ttl=refresh_ttl)
        return self._run(
            lambda: items_calls.get_item_op(self._context, get),
            read_only=not items_calls.refreshes(self._context, get.refresh),
        )

    def search_items(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        project: str,
        dataset: str | None = None,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = False,
    ) -> list[StoredItem]:
        """Items under `namespace_prefix` matching `filter` (LangGraph's: equality, `$eq`, `$ne`,
        `$gt`, `$gte`, `$lt`, `$lte`), in the scope, or in every dataset of `project` when `dataset`
        is None.
        No query: most recently updated first. A query ranks every item the prefix and filter
        select: first those whose fact a recall in their scope keeps, by its fused score
        (`StoredItem.score`), then the other items with text, nearest the query first (score 0.0),
        then those without text (score None). limit + offset at most `MAX_LIST_LIMIT` (10,000).
        `refresh_ttl`: the items found that have a TTL expire that long from now again (not on a
        read-only memory, which never writes)."""
        search = items_calls.check_search_items(
            namespace_prefix,
            project=project,
            dataset=dataset,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=refresh_ttl,
        )
        return self._run(
            lambda: items_calls.search_items_op(self._context, search),
            read_only=not items_calls.refreshes(self._context, search.refresh),
        )

    def list_item_namespaces(
        self,
        *,
        match: Sequence[tuple[str, Sequence[str]]] = (),
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
        project: str,
        dataset: str | None = None,
    ) -> list[tuple[str, ...]]:
        """Distinct namespaces of items matching every ("prefix" | "suffix", labels) pattern of
        `match` ("*" is any one label), cut to `max_depth` labels, sorted label by label; in the
        scope, or in every dataset of `project` when `dataset` is None."""
        listing = items_calls.check_list_item_namespaces(
            match=match, max_depth=max_depth, limit=limit, offset=offset, project=project, dataset=dataset
        )
        return self._run(lambda: items_calls.list_item_namespaces_op(self._context, listing), read_only=True)
