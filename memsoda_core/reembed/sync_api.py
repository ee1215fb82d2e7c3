# Generated from memsoda_core/reembed/async_api.py by tools/async_to_sync.py: do not edit, edit the source and run it.
"""`Memory.reembed`: move a store to another embedding model online, for synchronous code.

`ReembedMethods` (in `sync_api.py`) is generated from this module by `tools/async_to_sync.py`.

The run, each step a transaction of its own (`reembed.operation`): start or resume (the state row
and the next columns); the main pass, batch by batch in key order, each batch's vectors and cursor
committed together; the next indexes, built concurrently; a catch-up pass over the rows written
meanwhile; the switch, which embeds the last rows written while writers wait and swaps the columns.
Until the switch commits, recall reads the old vectors and writes go on with the old model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from memsoda_core.embedders import Embedder
from memsoda_core.errors import StoreBusyError
from memsoda_core.files import progress_callback
from memsoda_core.memory_context import MemoryContext
from memsoda_core.ops.maintenance import ensure_all_tenant_indexes
from memsoda_core.ops.open_settings import close_built
from memsoda_core.reembed import operation as reembed_ops
from memsoda_core.reembed.operation import DEFAULT_BATCH_SIZE, ReembedReport, ReembedState
from memsoda_core.reembed.statements import Cursor
from memsoda_core.runner.embedding import check_embedder
from memsoda_core.runner.sync_runner import Runner


class ReembedMethods:
    """`Memory.reembed` (it supplies these attributes)."""

    _runner: Runner
    _context: MemoryContext
    _embedder: Embedder
    _built_embedder: bool

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
        dimension. `progress` shows a bar on stderr."""
        self._context.check_writable("reembed")
        chosen = check_embedder(embedder)
        model, dimensions = str(chosen.model), int(chosen.dimensions)
        reembed_ops.check_reembed_args(model, dimensions, batch_size)
        info = self._context.info
        runner = self._runner.with_embedder(chosen, replace(info, model=model, dimensions=dimensions))
        state, resumed = runner.run(lambda: reembed_ops.start(info, model, dimensions))
        if state is None:
            return ReembedReport(model=model, dimensions=dimensions, switched=False)
        total = runner.run(reembed_ops.count_pending(info), read_only=True)
        with progress_callback(total, progress, "re-embedding") as advance:
            embedded = self._reembed_pass(runner, state, state.cursor, batch_size, advance, persist=True)
            renamed = runner.run(reembed_ops.build_next_indexes(info))
            caught = 0
            for attempt in range(1, reembed_ops.SWITCH_ATTEMPTS + 1):
                caught += self._reembed_pass(runner, state, Cursor(), batch_size, advance, persist=False)
                try:
                    caught += runner.run(lambda: reembed_ops.switch(info, state, renamed, batch_size))
                    break
                except StoreBusyError:
                    if attempt == reembed_ops.SWITCH_ATTEMPTS:
                        raise
        self._switched_to(chosen, runner)
        built = self._runner.run(ensure_all_tenant_indexes(self._context.info))
        return ReembedReport(
            model=model,
            dimensions=dimensions,
            switched=True,
            resumed=resumed,
            embedded=embedded,
            caught_up=caught,
            indexes=sorted({name.removesuffix("_next") for name in renamed} | set(built)),
        )

    def abandon_reembed(self) -> bool:
        """Drop a re-embed in progress (its new vectors, columns and indexes); the store stays on
        its model. False when none was in progress."""
        self._context.check_writable("abandon_reembed")
        return self._runner.run(lambda: reembed_ops.abandon(self._context.info))

    def _reembed_pass(
        self,
        runner: Runner,
        state: ReembedState,
        cursor: Cursor,
        batch_size: int,
        advance: Callable[[int], None] | None,
        *,
        persist: bool,
    ) -> int:
        """Re-embed, batch by batch from `cursor`, every row still to do; returns how many."""
        done = 0
        while True:
            cursor, rows = runner.run(reembed_ops.read_pending(self._context.info, cursor, batch_size), read_only=True)
            if not rows:
                return done
            cursor = runner.run(reembed_ops.write_batch(self._context.info, state, cursor, rows, persist=persist))
            done += len(rows)
            if advance is not None:
                advance(len(rows))

    def _switched_to(self, embedder: Embedder, runner: Runner) -> None:
        """From the switch on, this memory embeds with the new embedder into the new space."""
        old, built = self._runner.embedder, self._built_embedder
        info = replace(self._context.info, model=runner.info.model, dimensions=runner.info.dimensions)
        self._context = replace(self._context, info=info)
        self._runner = self._runner.with_embedder(embedder, info)
        self._embedder, self._built_embedder = embedder, False
        close_built(old if built else None)
