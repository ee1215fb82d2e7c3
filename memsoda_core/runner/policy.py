"""How the runners use connections and the pool: session settings, plan modes, pool lending,
connection checks, waits, and database errors as memsoda errors."""

from __future__ import annotations

import logging
import random
import select
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from memsoda_core.checks import CONFIGURATION, check_int, check_number
from memsoda_core.errors import (
    MemsodaError,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)
from memsoda_core.runner.steps import OutsideTransaction, OwnTransaction, ReadAside

logger = logging.getLogger(__name__)


KNN_SETTINGS = (
    # Filtered HNSW scans stop early and under-fill a tenant's top-k; iterative scans keep going.
    sql.SQL("SET hnsw.iterative_scan = relaxed_order"),
    sql.SQL("SET hnsw.ef_search = 100"),
)
"""What a recall's kNN needs on every node that runs it (a Citus worker too:
`distributed.worker_settings`)."""

SESSION_SETTINGS = (
    *KNN_SETTINGS,
    # Timestamps come back in the session's time zone: in UTC, the datetimes memsoda returns and the
    # days it renders are the same whatever the server's or the client's default.
    sql.SQL("SET timezone = 'UTC'"),
)
"""Run on every new pooled connection."""

SNAPSHOT = sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
"""The first statement of a run that reads one snapshot (`snapshot=True`): every statement of its
transaction sees the store as it was at the first, whatever commits meanwhile; it writes nothing.
Allowed on a hot standby too."""

FORCE_GENERIC_PLAN = sql.SQL("SET plan_cache_mode = force_generic_plan")
END_GENERIC_PLAN = sql.SQL("RESET plan_cache_mode")
"""Sent before and after a `Planning.GENERIC` statement, in one pipeline (one round trip). If the
statement fails on the server, the pipeline's implicit transaction (autocommit) or the operation's
transaction rolls the setting back; if the client stops in between (an error before sending, a
cancelled task), the connection stays in `GENERIC_PLAN_PENDING` and the runner restores it before
the connection goes back to the pool. (Not the pool's `reset` callback:
with one, psycopg_pool returns every connection through a worker thread, later.)"""

GENERIC_PLAN_PENDING: weakref.WeakSet[Any] = weakref.WeakSet()
"""Connections where a `Planning.GENERIC` statement started and did not finish."""

PIPELINE_SUPPORTED = psycopg.Pipeline.is_supported()
"""Pipelines need libpq 14+ (psycopg[binary] ships it); without, GENERIC statements run as CACHED
and recall's statements run one after the other on one connection."""

PREPARE_ONLY_WHEN_ASKED = sys.maxsize
"""psycopg's threshold for preparing a statement by itself: never reached. `None` would disable
preparing altogether, even the statements memsoda asks for (`Execute.planning`)."""

PREPARED_MAX = 40
"""Prepared statements kept per pooled connection (psycopg drops the least recently used): the
shared recall statements and the own statements of ~18 indexed scopes, at a bounded server memory
per connection (bench/RESULTS.md, "Plans and pools")."""

CONNECTION_KWARGS: dict[str, Any] = {
    # Automatic preparation would share one generic plan across tenants of very different sizes;
    # only statements whose one plan suits every scope they run for are prepared, on request
    # (see `recall.planning`).
    "prepare_threshold": PREPARE_ONLY_WHEN_ASKED,
    "autocommit": False,
}


PROBE_AFTER_S = 1.0
"""While waiting for a pooled connection, check this often whether PostgreSQL is reachable."""
PROBE_CONNECT_TIMEOUT_S = 2

RECONNECT_TIMEOUT_S = 2.0
"""How long the pool keeps trying in the background to replace a connection it lost, its waits
growing (1 s, 2 s, 4 s, ...), before it gives that connection up. A request that then finds no
connection makes the pool open one at once, so a server that is back serves the next request
instead of the pool's next try, which after a long outage (psycopg_pool's default gives up after
5 minutes) can be half a minute away."""

SPARE_CONNECTION_WAIT_S = 0.002
"""How long a recall waits for a second pooled connection to run its statements at once; without
one (a busy pool) it runs them one after the other on its own connection, so recalls never wait
on each other for spare connections."""

CANCEL_TIMEOUT_S = 5.0
"""How long a recall whose other statement failed (or whose task was cancelled) waits for the
server to accept the cancel request for the statement still running."""

READ_ASIDE_CONNECTION_WAIT_S = 0.05
"""How long a write waits for a connection to look up known entities before embedding (`ReadAside`).
The look-up only saves work, so on a busy pool it is skipped (every name is embedded) rather than
adding a wait to the one the write's own connection may need."""

NODE_CONNECTION_WAIT_S = 1.0
"""How long a read on another node of the cluster (`steps.ReadOnNode`) waits for a connection to
it: its pool connects in the background when first used. A node that gives none in that time
is read through the coordinator for `NODE_RETRY_S`, so a worker this client cannot reach (a
hosted cluster's private network) costs one wait a minute."""

NODE_RETRY_S = 60.0

POOL_MIN_SIZE = 2
"""Connections kept open: a recall's two statements run at once on two of them."""

POOL_FILL_POLL_S = 0.005
"""How often opening a store looks whether the pool holds its first connections yet."""


def lend_newest_first(idle: object) -> bool:
    """Before psycopg_pool takes the oldest idle connection (it lends first in, first out), move the
    newest to the front, so the pool lends last in, first out: a recall then gets the warm
    connections the previous one used, and the least used stay idle until `max_idle` closes them
    (bench/RESULTS.md, "Plans and pools"). psycopg_pool has no option for this; `idle` is its
    private queue, left alone if that ever changes shape. Returns whether it was turned."""
    if isinstance(idle, deque) and len(idle) > 1:
        idle.rotate(1)
        return True
    return False


def lend_oldest_first(idle: object) -> None:
    """Undo `lend_newest_first` when the pool then lent nothing (a spent timeout, an error)."""
    if isinstance(idle, deque):
        idle.rotate(-1)


def may_be_dropped(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a pooled connection needs the pool's round-trip check before it is lent: only when
    it is closed or its socket has something to read. An idle connection is sent nothing, so news
    means the server closed or terminated it (a restart, `pg_terminate_backend`, an idle timeout:
    each sends a message and closes the socket) or a notification came. This keeps the pool's
    self-healing without a round trip per checkout (two per recall)."""
    if conn.closed:
        return True
    try:
        if hasattr(select, "poll"):
            poller = select.poll()  # no limit on descriptor numbers, unlike select()
            poller.register(conn.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([conn.fileno()], [], [], 0)  # Windows has no poll()
        return bool(readable)
    except Exception:
        return True  # unsure: let the pool ping it


def probe_wait(deadline: float) -> float:
    """How long to wait for a pooled connection before probing the server again."""
    return max(0.0, min(PROBE_AFTER_S, deadline - time.monotonic()))


def connection_failed(exc: BaseException) -> StoreUnavailableError:
    """A failed connection attempt as the error to raise: the server answered and refused it
    ("rejected": authentication, an unknown database, too many connections), or it could not be
    reached ("unreachable": stopped, starting, shutting down, a wrong address)."""
    text = str(exc).strip()
    if "FATAL:" in text and "the database system is" not in text:
        return rejected(exc)
    return StoreUnavailableError(f"PostgreSQL is unavailable (unreachable): {text}")


def rejected(exc: BaseException) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"PostgreSQL is reachable but rejected a new connection (or its setup): {str(exc).strip()}"
    )


def pool_exhausted(pool_timeout: float, in_use: int, pool_size: int) -> StoreUnavailableError:
    """No pooled connection within `pool_timeout` while PostgreSQL accepts new connections."""
    if in_use >= pool_size:
        why = f"all {pool_size} pooled connections were in use"
    else:
        why = f"{in_use} of {pool_size} pooled connections were in use and the pool could not open another"
    return StoreUnavailableError(
        f"no pooled connection became free within pool_timeout={pool_timeout:g} s ({why}; PostgreSQL "
        "accepts connections); raise pool_size or pool_timeout"
    )


def check_pool_args(pool_size: Any, pool_timeout: Any) -> None:
    check_int(pool_size, "pool_size", low=1, errors=CONFIGURATION)
    check_number(pool_timeout, "pool_timeout", positive=True, finite=False, unit="seconds", errors=CONFIGURATION)


BUSY_SQLSTATES = {
    "40P01": "a deadlock",
    "40001": "a serialization failure",
    "57014": "a statement timeout or cancel",
    "55P03": "a lock timeout",
}
"""Errors of a server that is up and ended one transaction: `StoreBusyError`, not an outage."""

RERUN_SQLSTATES = frozenset({"40P01", "40001"})
"""A transaction PostgreSQL ended as the victim of a deadlock or a serialization conflict was
rolled back whole and can simply run again; a timeout run again would only wait as long again."""

RERUN_ATTEMPTS = 4
"""Runs of an operation in all (the first and three more) while it keeps being such a victim."""

RERUN_BACKOFF_S = 0.05
"""The wait before the second run; it doubles before each further one, with jitter, so two
victims of one another do not meet again in step."""


@dataclass
class RunEffects:
    """What one run of an operation did beyond its transaction."""

    left_transaction: bool = False
    """A commit (`OutsideTransaction`, `OwnTransaction`) or a line or count handed out (`Emit`,
    `Progress`): the run cannot simply be undone and run again."""
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    """What to do once the run has committed (`steps.AfterCommit`); dropped with a failed run."""


def may_rerun(exc: BaseException, attempt: int) -> bool:
    """Whether an operation that failed with `exc` in its run number `attempt` runs again (its
    transaction was rolled back and nothing of it had left it: the caller checks that)."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in RERUN_SQLSTATES and attempt < RERUN_ATTEMPTS


def rerun_delay(attempt: int) -> float:
    """How long to wait before run `attempt` + 1."""
    return float(RERUN_BACKOFF_S * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))


READ_ONLY_SQLSTATE = "25006"
"""read_only_sql_transaction: a write in a read-only session (a demoted server, a read-only role)."""


INSUFFICIENT_RESOURCES = "53"
"""SQLSTATE class 53: the server is up but short of memory, disk or a configured limit for this
statement (psycopg raises them as `OperationalError`, as it does lost connections)."""

TOO_MANY_CONNECTIONS = "53300"
"""Of class 53, the one that refuses a connection: `StoreUnavailableError`."""

OUT_OF_MEMORY = "53200"
LOCK_TABLE_HINT = "max_locks_per_transaction"


def out_of_resources(exc: psycopg.Error, code: str, *, retry_safe: bool) -> StoreError:
    """A statement the server could not finish for lack of a resource (SQLSTATE class 53, its
    transaction rolled back): a `StoreError` that says which and what to do, not an outage.
    `retry_safe`: the operation committed nothing before."""
    text = exc.diag.message_primary or str(exc).strip()
    hint = exc.diag.message_hint or ""
    kept = "nothing of the operation was committed" if retry_safe else "part of it had committed before"
    if code == OUT_OF_MEMORY and LOCK_TABLE_HINT in hint:
        return StoreError(
            f"PostgreSQL's shared lock table is full ({text}, SQLSTATE {code}): a transaction took more "
            f"locks than max_locks_per_transaction x max_connections leave room for; {kept}. Raise "
            "max_locks_per_transaction (a server restart), or write in smaller batches"
        )
    also = f"; hint: {hint}" if hint else ""
    return StoreError(
        f"PostgreSQL ran out of a resource ({text}, SQLSTATE {code}{also}); {kept}. Give the server "
        "more (memory, disk, the setting named), or write in smaller batches"
    )


def translate_db_error(exc: BaseException, *, retry_safe: bool = True, runs: int = 1) -> MemsodaError:
    """A database or pool error as a documented memsoda error. `retry_safe`: the operation committed
    nothing before it failed; `runs`: how often it was run."""
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return StoreUnavailableError(
            f"no database connection became free in time ({exc}); raise pool_size or pool_timeout"
        )
    code = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    if code is not None and code in BUSY_SQLSTATES:
        ran = f" (run {runs} times)" if runs > 1 else ""
        after = (
            "it committed nothing and can be called again"
            if retry_safe
            else "part of it had committed before: check before calling it again"
        )
        return StoreBusyError(
            f"PostgreSQL ended the operation with {BUSY_SQLSTATES[code]}{ran}, SQLSTATE {code}: "
            f"{str(exc).strip()}; {after}",
            sqlstate=code,
            retry_safe=retry_safe,
        )
    if code == READ_ONLY_SQLSTATE:
        return ReadOnlyStoreError(
            f"PostgreSQL refused a write: the session is read-only ({str(exc).strip()}); the server may have "
            "become a standby, or the role reads only: write through a memory opened on the primary"
        )
    if (
        isinstance(exc, psycopg.Error)
        and code
        and code.startswith(INSUFFICIENT_RESOURCES)
        and code != TOO_MANY_CONNECTIONS
    ):
        return out_of_resources(exc, code, retry_safe=retry_safe)
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailableError(f"PostgreSQL is unavailable: {str(exc).strip()}")
    return StoreError(f"the database rejected the operation: {str(exc).strip()}")


def read_aside_failed(request: ReadAside, exc: BaseException) -> None:
    """Log a failed best-effort read; the operation goes on without what it would have told."""
    logger.info("best-effort read failed, going on without it: %s (%s)", exc, request.statement)


def outside_transaction_failed(request: OutsideTransaction, exc: BaseException) -> None:
    """Log a failed statement run outside the transaction; the operation goes on (a later write
    retries it)."""
    logger.warning("statement outside the transaction failed, to be retried later: %s (%s)", exc, request.statement)


def own_transaction_failed(request: OwnTransaction, exc: BaseException) -> None:
    """Log a failed transaction of its own (rolled back whole); the operation goes on (a later write
    retries it)."""
    logger.warning("transaction of its own failed and was rolled back, to be retried later: %s", exc)
