"""An `AsyncMemory` belongs to the event loop that opened it: its pool's worker and scheduler
tasks run there, so from another loop a connection the pool has to make never comes (a wait to
`pool_timeout`), and its close fails on that loop's dead tasks. Operations from another loop are
refused at once (`check_loop`); `close_from_any_loop` closes it from anywhere it can. Async only:
the sync runner has no loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from memsoda_core.errors import EventLoopError
from memsoda_core.runner.async_pool import Pool


def check_loop(pool: Pool) -> None:
    """Raise `EventLoopError` unless running in the loop that opened `pool`."""
    if asyncio.get_running_loop() is not pool.loop:
        raise EventLoopError(
            "this AsyncMemory was opened in another event loop (each asyncio.run() starts a new one), "
            "where its connection pool runs: open it inside the coroutine that uses it"
        )


async def close_from_any_loop(pools: Sequence[Pool], close: Callable[[], Awaitable[None]]) -> None:
    """Run `close` (which closes `pools`, all opened in one loop) in the loop that opened them, if
    it is the running one. A loop that no longer runs (closed by `asyncio.run`, or stopped) took
    the pools' tasks with it: only their idle connections are left, closed here. A loop still
    running in another thread may be using them: `EventLoopError`, saying to close it there."""
    opened_in = pools[0].loop
    if asyncio.get_running_loop() is opened_in:
        await close()
    elif opened_in.is_running():
        raise EventLoopError(
            "this AsyncMemory's event loop is still running in another thread: close it there "
            "(asyncio.run_coroutine_threadsafe(memory.close(), loop))"
        )
    else:
        for pool in pools:
            await _close_orphaned(pool)


async def _close_orphaned(pool: Pool) -> None:
    """Close `pool` without its tasks, which ended with their loop: mark it closed (a connection
    lent out is then closed when returned), forget the tasks and close the idle connections (each
    close ends its socket and awaits nothing of a loop)."""
    pool._closed = True
    pool._workers.clear()
    pool._sched_runner = None
    idle = list(pool._pool)
    pool._pool.clear()
    for conn in idle:
        await conn.close()
