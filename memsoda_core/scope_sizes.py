"""Which recall statements the server may keep a plan for.

Planning is most of a small scope's recall: for a 1,000-fact tenant the anchor statement took
1.3 ms to plan and 0.3 ms to run. A scope under the tenant-index threshold is searched exactly
(no index of its own), so one plan fits every such scope: its recall statements are prepared on
the connection, and PostgreSQL keeps a generic plan after its fifth run when that plan costs no
more than planning each time. A scope with its own indexes is never given a prepared statement:
only a plan made with its actual tenant values can use its partial indexes (a shared generic plan
scanned a 100k-fact tenant exactly: PERF-NOTES' 110 ms trap).

So recall needs the scope's size. It is read once (a primary-key lookup) and remembered for
`SCOPE_SIZE_TTL_S`; writes through the same store forget it at once. A size out of date can only
cost speed, never change a result: both kinds of plan return the same rows.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from .validation import Scope

SCOPE_SIZE_TTL_S = 30.0
"""How long a scope's fact count is trusted. Another process may grow a scope past the threshold
meanwhile; until then this one searches it exactly (correct, slower)."""

SCOPE_SIZES_KEPT = 4096


class ScopeSizes:
    """A bounded, expiring map of scope -> fact count (thread-safe)."""

    def __init__(self, ttl_s: float = SCOPE_SIZE_TTL_S, size: int = SCOPE_SIZES_KEPT) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._items: OrderedDict[Scope, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> int | None:
        """The remembered fact count of `scope`, or None when unknown or expired."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return None
            facts, expires = item
            if time.monotonic() >= expires:
                del self._items[scope]
                return None
            self._items.move_to_end(scope)
            return facts

    def put(self, scope: Scope, facts: int) -> None:
        with self._lock:
            self._items[scope] = (facts, time.monotonic() + self._ttl_s)
            self._items.move_to_end(scope)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def forget(self, scope: Scope) -> None:
        """Drop what is known of `scope` (it was just written to)."""
        with self._lock:
            self._items.pop(scope, None)
