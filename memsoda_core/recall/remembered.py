"""What a memory remembers of each scope between recalls: a bounded, expiring, thread-safe map."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from memsoda_core.validation import Scope

V = TypeVar("V")


class ScopeMemo(Generic[V]):
    """scope -> a value, trusted for `ttl_s` (another process may change the scope meanwhile) and
    at most `size` scopes, the least recently used dropped first."""

    def __init__(self, ttl_s: float, size: int) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._items: OrderedDict[Scope, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> V | None:
        """What is remembered of `scope`, or None when unknown or expired."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return None
            value, expires = item
            if time.monotonic() >= expires:
                del self._items[scope]
                return None
            self._items.move_to_end(scope)
            return value

    def put(self, scope: Scope, value: V) -> None:
        with self._lock:
            self._items[scope] = (value, time.monotonic() + self._ttl_s)
            self._items.move_to_end(scope)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def update(self, scope: Scope, change: Callable[[V], V | None]) -> None:
        """Replace what is remembered of `scope` by `change` of it (None: drop it), trusted no longer
        than before: a write's report corrects a value, it does not read it again."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return
            value, expires = item
            changed = change(value) if time.monotonic() < expires else None
            if changed is None:
                del self._items[scope]
            else:
                self._items[scope] = (changed, expires)

    def forget(self, scope: Scope) -> None:
        """Drop what is known of `scope` (it was just written to)."""
        with self._lock:
            self._items.pop(scope, None)

    def forget_all(self) -> None:
        """Drop everything (the store's layout changed: it is read again)."""
        with self._lock:
            self._items.clear()
