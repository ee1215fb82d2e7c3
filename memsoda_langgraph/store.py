"""`MemsodaStore`: LangGraph's `BaseStore` on memsoda's items (`Memory.put_items` and the rest).
Translation only: the items, their facts and the recall behind `search` are memsoda_core's.

Namespaces map to scopes by their first `scope_depth` labels (default 2): ("memories", "u1") and
("memories", "u1", "profile") lie in one scope, so one user's items share one tenant, one recall
and one Citus shard, and two users never share any of them. `dataset_of(head)` names that
scope's dataset, by default "<label>.<label>" (LangGraph labels hold no ".", so distinct heads
never meet), in the store's `project`. The whole namespace is kept with each item, so it comes
back as given. A search or listing whose prefix is shorter than `scope_depth` spans the scopes
under it. The user of a run is in the namespace: langmem's tools fill a template such as
("memories", "{langgraph_user_id}") from `config["configurable"]` (and raise when it is not set).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from memsoda_core import (
    AsyncMemory,
    ConfigurationError,
    InvalidTextError,
    LimitError,
    Memory,
    ScopeArgs,
    TextTooLongError,
)
from memsoda_core.adapting import framework_query
from memsoda_core.items.calls import CHECKS, check_put_items
from memsoda_core.items.values import (
    MAX_LABEL_CHARS,
    MAX_LIST_LIMIT,
    MAX_NAMESPACE_LABELS,
    ItemInput,
    StoredItem,
    check_key,
    check_namespace,
    check_page,
    check_value,
)
from memsoda_core.limits import MAX_SCOPE_CHARS
from memsoda_core.validation import check_scope

DatasetOf = Callable[[tuple[str, ...]], str]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Puts:
    """Consecutive puts into one scope: one `put_items` call (one transaction, one embedding)."""

    scope: ScopeArgs
    items: list[ItemInput]


@dataclass(frozen=True)
class _Known:
    """A read whose answer is known without the database (`MemsodaStore._known`)."""

    position: int
    result: Result


@dataclass(frozen=True)
class _Read:
    """A get, search or listing: the memsoda method it calls, its arguments, its op's position."""

    position: int
    op: GetOp | SearchOp | ListNamespacesOp
    method: str
    arguments: dict[str, Any]


class MemsodaStore(BaseStore):
    """A LangGraph store whose items live in memsoda and whose `search(query=...)` is memsoda's
    recall (vector, entity anchor and keyword signals fused by RRF; `SearchItem.score` is the
    fused score); a query longer than recall takes is recalled by its head (`framework_query`).

    `memory`: a `Memory` serves `batch` and `abatch` (the latter in a worker thread); an
    `AsyncMemory` serves `abatch` only, and `batch` raises `ConfigurationError` (its pool lives on
    an event loop). `project` (required, as everywhere in memsoda) / `scope_depth` / `dataset_of`:
    see the module docstring. `fields`: what an item is found by when `put` gives no `index`:
    LangGraph paths ("content", "facts[*].text"), "$" being every string in the value. By default
    (None) it is the value's "content" (LangGraph's and langmem's field for a memory's text; every
    string in it when it is an object), else, for a value without "content", every string in it:
    so a value's other fields ({"content": ..., "kind": "note"}) stay out of the fact, and are
    still filterable. `index=False` stores an item that only `get` and searches without a query
    find. Ops of a batch apply in order, once every one is checked: a bad op (a value that is
    not a dict: `ArgumentTypeError`; any other `ValidationError`) raises before any is applied.
    A read of an address no put can store (`()`, past memsoda's limits) finds nothing and a delete
    of it does nothing, as in `InMemoryStore` (README, "Where it differs from `InMemoryStore`").

    `ttl`: LangGraph's `TTLConfig`, as its PostgresStore takes it (see "TTL" below): `default_ttl`
    (minutes) for puts that give none, `refresh_on_read` (default True) for get and search, and
    `sweep_interval_minutes` for `start_ttl_sweeper`.
    """

    supports_ttl = True

    __slots__ = (
        "_dataset_of",
        "_fields",
        "_memory",
        "_project",
        "_scope_depth",
        "_sweep_task",
        "_sweeper",
        "ttl_config",
    )

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        *,
        project: str,
        scope_depth: int = 2,
        dataset_of: DatasetOf | None = None,
        fields: Sequence[str] | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if not isinstance(memory, Memory | AsyncMemory):
            raise ConfigurationError(f"MemsodaStore needs a memsoda Memory or AsyncMemory, got {type(memory).__name__}")
        if isinstance(scope_depth, bool) or not isinstance(scope_depth, int) or scope_depth < 1:
            raise ConfigurationError(f"scope_depth must be a positive int, got {scope_depth!r}")
        check_scope("-", project)  # the project alone: each namespace names its dataset
        self._memory = memory
        self._project = project
        self._scope_depth = scope_depth
        self._dataset_of = dataset_of or ".".join
        self._fields = None if fields is None else tuple(fields)
        self.ttl_config = ttl
        self._sweeper: _Sweeper | None = None
        self._sweep_task: asyncio.Task[None] | None = None

    def scope(self, namespace: tuple[str, ...]) -> ScopeArgs:
        """The memsoda scope (dataset, project keywords) of a namespace."""
        return {"dataset": self._dataset_of(tuple(namespace[: self._scope_depth])), "project": self._project}

    # --- BaseStore ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        memory = self._memory
        if isinstance(memory, AsyncMemory):
            raise ConfigurationError(
                "this MemsodaStore wraps an AsyncMemory: use the async API (ainvoke, aput, asearch), "
                "or give it a Memory for synchronous calls"
            )
        listed = list(ops)
        results: list[Result] = [None] * len(listed)
        for step in self._plan(listed):
            if isinstance(step, _Puts):
                memory.put_items(step.items, **step.scope)
            elif isinstance(step, _Known):
                results[step.position] = step.result
            else:
                results[step.position] = self._translate(step.op, getattr(memory, step.method)(**step.arguments))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        memory = self._memory
        if isinstance(memory, Memory):
            return await asyncio.to_thread(self.batch, list(ops))
        listed = list(ops)
        results: list[Result] = [None] * len(listed)
        for step in self._plan(listed):
            if isinstance(step, _Puts):
                await memory.put_items(step.items, **step.scope)
            elif isinstance(step, _Known):
                results[step.position] = step.result
            else:
                reply = await getattr(memory, step.method)(**step.arguments)
                results[step.position] = self._translate(step.op, reply)
        return results

    # --- translation -------------------------------------------------------------------------------

    def _plan(self, ops: Sequence[Op]) -> list[_Puts | _Known | _Read]:
        """The memsoda calls of `ops`, in order, every one checked (`items.calls.CHECKS`) before
        the first runs: a bad op raises before the batch writes anything, as one op does."""
        steps = list(self._steps(ops))
        if len(steps) > 1:  # one call checks itself before it writes
            for step in steps:
                if isinstance(step, _Puts):
                    check_put_items(step.items, **step.scope)
                elif isinstance(step, _Read):
                    CHECKS[step.method](**step.arguments)
        return steps

    def _steps(self, ops: Sequence[Op]) -> Iterator[_Puts | _Known | _Read]:
        """The ops in order, runs of puts into one scope merged (a later put of a key wins). A
        delete of an address no put can store is a no-op, as a delete of a missing item is."""
        pending: _Puts | None = None
        for position, op in enumerate(ops):
            _check_labels(op)
            if isinstance(op, PutOp) and op.value is None and not self._storable(op.namespace, op.key):
                continue
            if isinstance(op, PutOp):
                scope = self.scope(op.namespace)
                if pending is not None and pending.scope != scope:
                    yield pending
                    pending = None
                if pending is None:
                    pending = _Puts(scope, [])
                pending.items.append(self._item_input(op))
                continue
            if pending is not None:
                yield pending
                pending = None
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                raise ValueError(f"unknown store operation {type(op).__name__}")
            known = self._known(op)
            yield _Read(position, op, *self._arguments(op)) if known is None else _Known(position, known[0])
        if pending is not None:
            yield pending

    def _storable(self, namespace: tuple[str, ...], key: str | None = None) -> bool:
        """Whether a put can store an item under `namespace` (and `key`): not the root, and within
        memsoda's limits (`items.values`: labels, label and key length, and the scope's dataset
        name). Any other address holds nothing: reads of it find nothing and a delete of it does
        nothing, as in LangGraph's stores, which take any. Other bad input (a key that is not a
        string) still raises, from the call itself."""
        if not namespace:
            return False
        try:
            check_namespace(namespace)
            if key is not None:
                check_key(key)
        except (LimitError, TextTooLongError, InvalidTextError):
            return False
        return len(self.scope(namespace)["dataset"]) <= MAX_SCOPE_CHARS

    def _known(self, op: GetOp | SearchOp | ListNamespacesOp) -> tuple[Result] | None:
        """The answer of a read that needs no query (None: ask the memory): a get or a search of an
        address no put can store (`_storable`) finds nothing, and a namespace pattern no stored
        namespace can match lists nothing, as in `InMemoryStore`. The op's other arguments are
        checked all the same (a bad filter, limit or offset raises as for any address)."""
        if isinstance(op, GetOp):
            return None if self._storable(op.namespace, op.key) else (None,)
        if isinstance(op, SearchOp):
            if not op.namespace_prefix or self._storable(op.namespace_prefix):
                return None
            CHECKS["search_items"](**self._arguments(op._replace(namespace_prefix=()))[1])
            return ([],)
        if all(_matchable(condition.path) for condition in op.match_conditions or ()):
            return None
        CHECKS["list_item_namespaces"](**self._arguments(op._replace(match_conditions=None))[1])
        return ([],)

    def _item_input(self, op: PutOp) -> ItemInput:
        value = check_value(op.value)  # a value that is not a dict: ArgumentTypeError
        if value is None:
            return ItemInput(namespace=op.namespace, key=op.key, value=None)
        paths = self._fields if op.index is None else () if op.index is False else tuple(op.index)
        if paths is None:
            texts = _texts(value.get("content", value), "$")
        else:
            texts = [text for path in paths for text in _texts(value, path)]
        return ItemInput(
            namespace=op.namespace, key=op.key, value=value, text="; ".join(texts) or None, ttl_minutes=op.ttl
        )

    def _arguments(self, op: Op) -> tuple[str, dict[str, Any]]:
        """The memsoda method an op calls, and its arguments."""
        if isinstance(op, GetOp):
            scope = self.scope(op.namespace)
            return "get_item", {"namespace": op.namespace, "key": op.key, **scope, **_refresh(op)}
        if isinstance(op, SearchOp):
            where = self._scope_or_project(
                op.namespace_prefix if len(op.namespace_prefix) >= self._scope_depth else None
            )
            return "search_items", {
                "namespace_prefix": op.namespace_prefix,
                "query": framework_query(op.query),  # langmem's manager searches by the latest messages
                "filter": op.filter,
                "limit": op.limit,
                "offset": op.offset,
                **where,
                **_refresh(op),
            }
        assert isinstance(op, ListNamespacesOp)
        if op.max_depth == 0:  # the root alone, if any namespace matches (`_translate`)
            check_page(op.limit, op.offset, most=MAX_LIST_LIMIT)
            return self._arguments(op._replace(max_depth=1, limit=1, offset=0))
        conditions = op.match_conditions or ()
        known = [c.path for c in conditions if c.match_type == "prefix" and "*" not in c.path[: self._scope_depth]]
        fixed = next((path for path in known if len(path) >= self._scope_depth), None)
        return "list_item_namespaces", {
            "match": [(c.match_type, c.path) for c in conditions],
            "max_depth": op.max_depth,
            "limit": op.limit,
            "offset": op.offset,
            **self._scope_or_project(None if fixed is None else tuple(fixed)),
        }

    def _scope_or_project(self, namespace: tuple[str, ...] | None) -> dict[str, str]:
        """A namespace's scope, or (None) every dataset of the store's project."""
        if namespace is None:
            return {"project": self._project}
        scope = self.scope(namespace)
        return {"dataset": scope["dataset"], "project": scope["project"]}

    @staticmethod
    def _translate(op: Op, reply: Any) -> Result:
        if isinstance(op, GetOp):
            return None if reply is None else _item(reply)
        if isinstance(op, SearchOp):
            return [_search_item(stored) for stored in reply]
        assert isinstance(op, ListNamespacesOp)
        if op.max_depth == 0:  # every namespace cut to no label: `InMemoryStore`'s answer
            root: list[tuple[str, ...]] = [()]
            return root if reply and op.limit > 0 and op.offset == 0 else []
        return [tuple(namespace) for namespace in reply]

    # --- TTL: LangGraph's, as its PostgresStore has it --------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete the store's items (of its project) whose TTL has run out, with their facts
        (`Memory.sweep_items`); returns how many items went. Needs a `Memory`; else `asweep_ttl`."""
        memory = self._memory
        if isinstance(memory, AsyncMemory):
            raise ConfigurationError("this MemsodaStore wraps an AsyncMemory: use asweep_ttl()")
        return memory.sweep_items(project=self._project)

    async def asweep_ttl(self) -> int:
        """`sweep_ttl` for async code (a `Memory` runs in a worker thread)."""
        memory = self._memory
        if isinstance(memory, Memory):
            return await asyncio.to_thread(self.sweep_ttl)
        return await memory.sweep_items(project=self._project)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep every `sweep_interval_minutes` (else the config's, else 5) in a daemon thread until
        `stop_ttl_sweeper` or the future's cancel; the future completes when it stops. Without a
        `ttl` config, nothing runs and the future is done (PostgresStore's behaviour); a sweep that
        fails is logged and the next one runs. A sweeper already running is kept."""
        if isinstance(self._memory, AsyncMemory):
            raise ConfigurationError("this MemsodaStore wraps an AsyncMemory: use await astart_ttl_sweeper()")
        if self._sweeper is not None and self._sweeper.thread.is_alive():
            return self._sweeper.future
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config:
            future.set_result(None)
            return future
        sweeper = _Sweeper(threading.Event(), future, threading.Thread())
        sweeper.thread = threading.Thread(
            target=self._sweep_loop,
            args=(sweeper, self._sweep_interval_s(sweep_interval_minutes)),
            name="memsoda-ttl-sweeper",
            daemon=True,
        )
        future.add_done_callback(lambda done: sweeper.stop.set() if done.cancelled() else None)  # as PostgresStore
        self._sweeper = sweeper
        sweeper.thread.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread (waiting at most `timeout` seconds); True when none runs now."""
        sweeper = self._sweeper
        if sweeper is None:
            return True
        sweeper.stop.set()
        sweeper.thread.join(timeout)
        stopped = not sweeper.thread.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    async def astart_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """`start_ttl_sweeper` as a task on the running event loop (AsyncPostgresStore's form);
        `astop_ttl_sweeper` cancels it."""
        if self._sweep_task is not None and not self._sweep_task.done():
            return self._sweep_task
        if not self.ttl_config:
            return asyncio.create_task(asyncio.sleep(0))
        interval_s = self._sweep_interval_s(sweep_interval_minutes)

        async def sweep_loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    _log_sweep(await self.asweep_ttl())
                except Exception:
                    logger.exception("MemsodaStore TTL sweep failed; the next one runs in %.0f s", interval_s)

        self._sweep_task = asyncio.create_task(sweep_loop(), name="memsoda-ttl-sweeper")
        return self._sweep_task

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (PostgresStore's signature)
        """Cancel the sweeper task (waiting at most `timeout` seconds); True when none runs now."""
        task = self._sweep_task
        if task is None:
            return True
        task.cancel()
        await asyncio.wait([task], timeout=timeout)
        if task.done():
            self._sweep_task = None
        return task.done()

    def _sweep_interval_s(self, minutes: float | None) -> float:
        config = self.ttl_config or {}
        return float(minutes or config.get("sweep_interval_minutes") or 5) * 60

    def _sweep_loop(self, sweeper: _Sweeper, interval_s: float) -> None:
        while not sweeper.stop.wait(interval_s):
            try:
                _log_sweep(self.sweep_ttl())
            except Exception:
                logger.exception("MemsodaStore TTL sweep failed; the next one runs in %.0f s", interval_s)
        if not sweeper.future.done():  # a cancelled future stopped the loop
            sweeper.future.set_result(None)


def _log_sweep(swept: int) -> None:
    if swept:
        logger.info("MemsodaStore TTL sweep deleted %d expired items", swept)


@dataclass
class _Sweeper:
    """A running TTL sweeper: its stop signal, its future, its thread."""

    stop: threading.Event
    future: concurrent.futures.Future[None]
    thread: threading.Thread


def _refresh(op: GetOp | SearchOp) -> dict[str, bool]:
    """The refresh of a read: LangGraph's `refresh_ttl` (BaseStore sets it from `TTLConfig`)."""
    return {"refresh_ttl": bool(op.refresh_ttl)}


def _texts(value: Any, path: str) -> list[str]:
    """The text at a LangGraph path of `value`; "$" is every string in it, in order."""
    if path != "$":
        return [text for text in get_text_at_path(value, path) if text.strip()]
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            if node.strip():
                found.append(node)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child)

    walk(value)
    return found


def _check_labels(op: Op) -> None:
    """LangGraph's own rule for namespaces (its stores check it in `batch` too): string labels,
    none empty or holding a "." (the default scope names rely on that) or a NUL."""
    if isinstance(op, GetOp | PutOp):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:
        paths = [c.path for c in op.match_conditions or ()]
    for path in paths:
        for label in path:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise InvalidNamespaceError(f"invalid namespace label {label!r} in {path!r}")
    if isinstance(op, PutOp) and op.value is not None and (not op.namespace or op.namespace[0] == "langgraph"):
        raise InvalidNamespaceError(f'a namespace must be non-empty and not start with "langgraph": {op.namespace!r}')


def _matchable(path: tuple[str, ...]) -> bool:
    """Whether a namespace pattern ("*" any one label) can match a namespace a put can store."""
    return len(path) <= MAX_NAMESPACE_LABELS and all(label == "*" or len(label) <= MAX_LABEL_CHARS for label in path)


def _item(stored: StoredItem) -> Item:
    return Item(
        value=stored.value,
        key=stored.key,
        namespace=stored.namespace,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
    )


def _search_item(stored: StoredItem) -> SearchItem:
    return SearchItem(
        namespace=stored.namespace,
        key=stored.key,
        value=stored.value,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
        score=stored.score,
    )
