# sync: """The driver of `Memory.reembed`: move a store to another embedding model online, for synchronous code.
"""The driver of `AsyncMemory.reembed`: move a store to another embedding model online, for asyncio.

Plain functions the memory calls with its runner (`sync_api.py` is generated from this module by
`tools/async_to_sync.py`); the memory's own state changes only in its `_switched_to`, which
`reembed_store` calls once the switch has committed.

The run, each step a transaction of its own (`reembed.operation`): start or resume (the state row
and the next columns); the main pass, batch by batch in key order, each batch's vectors and cursor
committed together; the next indexes, built concurrently; a catch-up pass over the rows written
meanwhile; the switch, which embeds the last rows written while writers wait and swaps the columns.
Until the switch commits, recall reads the old vectors and writes go on with the old model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from memsoda_core.embedders import Embedder
from memsoda_core.errors import StoreBusyError
from memsoda_core.files import progress_callback
from memsoda_core.ops.maintenance import ensure_all_tenant_indexes
from memsoda_core.reembed import operation as reembed_ops
from memsoda_core.reembed.operation import ReembedReport, ReembedState
from memsoda_core.reembed.statements import Cursor
from memsoda_core.runner.async_runner import AsyncRunner
from memsoda_core.runner.embedding import check_embedder
from memsoda_core.store.info import StoreInfo


async def reembed_store(
    runner: AsyncRunner,
    info: StoreInfo,
    embedder: Embedder,
    *,
    batch_size: int,
    progress: bool,
    switched: Callable[[AsyncRunner], Awaitable[None]],
) -> ReembedReport:
    """Re-embed the store `info` with `embedder` through `runner`'s pool and switch it to its model
    (`Memory.reembed` says what a caller sees); `switched` is given the runner on the new model as
    soon as the switch commits, before the tenant indexes the new columns lack are built."""
    chosen = check_embedder(embedder)
    model, dimensions = str(chosen.model), int(chosen.dimensions)
    reembed_ops.check_reembed_args(model, dimensions, batch_size)
    new = runner.with_embedder(chosen, replace(info, model=model, dimensions=dimensions))
    state, resumed = await new.run(lambda: reembed_ops.start(info, model, dimensions))
    if state is None:
        return ReembedReport(model=model, dimensions=dimensions, switched=False)
    total = await new.run(reembed_ops.count_pending(info), read_only=True)
    with progress_callback(total, progress, "re-embedding") as advance:
        embedded = await _reembed_pass(new, info, state, state.cursor, batch_size, advance, persist=True)
        renamed = await new.run(reembed_ops.build_next_indexes(info))
        caught = 0
        for attempt in range(1, reembed_ops.SWITCH_ATTEMPTS + 1):
            caught += await _reembed_pass(new, info, state, Cursor(), batch_size, advance, persist=False)
            try:
                caught += await new.run(lambda: reembed_ops.switch(info, state, renamed, batch_size))
                break
            except StoreBusyError:
                if attempt == reembed_ops.SWITCH_ATTEMPTS:
                    raise
    await switched(new)
    built = await new.run(ensure_all_tenant_indexes(new.info))
    return ReembedReport(
        model=model,
        dimensions=dimensions,
        switched=True,
        resumed=resumed,
        embedded=embedded,
        caught_up=caught,
        indexes=sorted({name.removesuffix("_next") for name in renamed} | set(built)),
    )


async def _reembed_pass(
    runner: AsyncRunner,
    info: StoreInfo,
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
        cursor, rows = await runner.run(reembed_ops.read_pending(info, cursor, batch_size), read_only=True)
        if not rows:
            return done
        cursor = await runner.run(reembed_ops.write_batch(info, state, cursor, rows, persist=persist))
        done += len(rows)
        if advance is not None:
            advance(len(rows))
