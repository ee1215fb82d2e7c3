"""What a memory remembers of each scope between recalls: a bounded, expiring, thread-safe map.

A value read while a write to its scope runs may hold that write or not, so each read and each
write takes a `ticket` first (one increasing clock): a value read before a write began is refused
once that write has begun (`put`), and a write's report changes only a value read before the write
began (`update`), never one that may already hold it."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, NamedTuple, TypeVar

from memsoda_core.validation import Scope

V = TypeVar("V")

_clock = itertools.count(1)


def ticket() -> int:
    """The next instant of the memos' clock: taken before a read of a scope, or as a write begins."""
    return next(_clock)


class _Kept(NamedTuple, Generic[V]):
    value: V
    expires: float
    read_at: int


class ScopeMemo(Generic[V]):
    """scope -> a value, trusted for `ttl_s` (another process may change the scope meanwhile) and
    at most `size` scopes, the least recently used dropped first."""

    def __init__(self, ttl_s: float, size: int) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._items: OrderedDict[Scope, _Kept[V]] = OrderedDict()
        self._written: OrderedDict[Scope, int] = OrderedDict()
        """When the latest write of each scope through this memory began (its `ticket`)."""
        self._lock = threading.Lock()

    def get(self, scope: Scope) -> V | None:
        """What is remembered of `scope`, or None when unknown or expired."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return None
            if time.monotonic() >= item.expires:
                del self._items[scope]
                return None
            self._items.move_to_end(scope)
            return item.value

    def put(self, scope: Scope, value: V, read_at: int | None = None) -> None:
        """Remember `value`, read at `read_at` (its `ticket`; None: now), unless a write of the scope
        began since: the value may not hold it."""
        with self._lock:
            if read_at is not None and self._written.get(scope, 0) > read_at:
                return
            self._items[scope] = _Kept(value, time.monotonic() + self._ttl_s, read_at or ticket())
            self._items.move_to_end(scope)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def writing(self, scope: Scope, began: int) -> None:
        """A write of `scope` began at `began` (its `ticket`)."""
        with self._lock:
            self._written[scope] = max(began, self._written.get(scope, 0))
            self._written.move_to_end(scope)
            while len(self._written) > self._size:
                self._written.popitem(last=False)

    def update(self, scope: Scope, change: Callable[[V], V | None], since: int) -> None:
        """Replace what is remembered of `scope` by `change` of it (None: drop it), for a write that
        began at `since`: only a value read before then, which cannot hold the write; a later one
        may, and is dropped. Trusted no longer than before: a write's report corrects a value, it
        does not read it again."""
        with self._lock:
            item = self._items.get(scope)
            if item is None:
                return
            fresh = time.monotonic() < item.expires and item.read_at < since
            changed = change(item.value) if fresh else None
            if changed is None:
                del self._items[scope]
            else:
                self._items[scope] = item._replace(value=changed)

    def forget(self, scope: Scope) -> None:
        """Drop what is known of `scope` (it was just written to)."""
        with self._lock:
            self._items.pop(scope, None)

    def forget_all(self) -> None:
        """Drop everything (the store's layout changed: it is read again)."""
        with self._lock:
            self._items.clear()
