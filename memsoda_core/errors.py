"""The errors memsoda raises. Every one derives from :class:`MemsodaError`.

::

    MemsodaError
    ├── ValidationError            bad input; nothing was written
    │   ├── ScopeError             missing or invalid dataset / project
    │   ├── EmptyFieldError        empty subject, predicate, object, text, ...
    │   ├── ConfidenceError        confidence outside 0..1
    │   ├── DateError              unparseable date, or a timezone-less value we cannot read
    │   ├── IntervalError          invalid_at at or before valid_at
    │   │   └── UnorderedValueError  a single-valued value its relation's history cannot order
    │   ├── TextTooLongError       a string over its documented limit
    │   ├── InvalidTextError       NUL bytes or unencodable (lone surrogate) characters
    │   ├── ArgumentTypeError      an argument of the wrong type (also a TypeError)
    │   ├── LimitError             a batch, k or query over its documented maximum
    │   ├── NotLiveError           supersede / invalidate of a fact that has ended
    │   └── ImportFormatError      a JSONL line that is not a valid record, or that the store's history cannot take
    ├── NotFoundError              a fact id that does not exist in the given scope
    ├── EmbeddingError             the embedder failed, timed out or returned bad vectors
    ├── ExtractionError            `remember`'s model failed, timed out or returned unusable operations
    ├── EmbedderMismatchError      the store was created with another embedding model or dimension
    ├── StoreError                 the database could not do what was asked
    │   ├── StoreUnavailableError  PostgreSQL cannot be reached, rejects connections, or no pooled connection was free
    │   ├── StoreBusyError         a deadlock, serialization failure, statement or lock timeout (`retry_safe`)
    │   ├── ReadOnlyStoreError     a write to a store open read-only (a replica, a read-only role)
    │   ├── LayoutChangedError     the store was distributed twice while an operation ran; call it again
    │   └── SchemaError            the schema is newer than this memsoda, or pgvector is missing
    ├── ConfigurationError         an option or environment variable is wrong
    └── EventLoopError             an AsyncMemory used outside the event loop that opened it (also a RuntimeError)
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "ConfidenceError",
    "ConfigurationError",
    "DateError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EmptyFieldError",
    "EventLoopError",
    "ExtractionError",
    "ImportFormatError",
    "IntervalError",
    "InvalidTextError",
    "LayoutChangedError",
    "LimitError",
    "MemsodaError",
    "NotFoundError",
    "NotLiveError",
    "ReadOnlyStoreError",
    "SchemaError",
    "ScopeError",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "TextTooLongError",
    "UnorderedValueError",
    "ValidationError",
]


class MemsodaError(Exception):
    """Base class of every error memsoda raises on purpose."""


class ValidationError(MemsodaError, ValueError):
    """Input was rejected before anything was written."""


class ScopeError(ValidationError):
    """`dataset` or `project` is missing, empty or not a string."""


class EmptyFieldError(ValidationError):
    """A required text field is empty or only whitespace."""


class ConfidenceError(ValidationError):
    """`confidence` is not a number between 0 and 1."""


class DateError(ValidationError):
    """A date or datetime could not be understood."""


class IntervalError(ValidationError):
    """`invalid_at` is at or before `valid_at`."""


class UnorderedValueError(IntervalError):
    """A value of a single-valued relation a write cannot place in its history: another value starts
    at the same instant, or two values of one batch have no start. `position` is the input's
    (0-based) index, so a caller that may drop inputs (`remember`) can reject that one alone."""

    def __init__(self, message: str, *, position: int) -> None:
        super().__init__(message)
        self.position = position


class TextTooLongError(ValidationError):
    """A string is longer than its documented maximum (see `memsoda_core.limits`)."""


class InvalidTextError(ValidationError):
    """A string holds characters PostgreSQL cannot store (NUL, lone surrogates)."""


class ArgumentTypeError(ValidationError, TypeError):
    """An argument of the wrong type (a string where a number or True/False goes)."""


class LimitError(ValidationError):
    """A batch size, `k` or other count is outside its documented range."""


class NotLiveError(ValidationError):
    """Only a live fact can be superseded or ended. `fact_id` is the fact asked for, `live_id` the
    fact that is live now in its supersede chain (None when none is)."""

    def __init__(self, message: str, *, fact_id: int, live_id: int | None) -> None:
        super().__init__(message)
        self.fact_id = fact_id
        self.live_id = live_id


class ImportFormatError(ValidationError):
    """A JSONL import line is not a valid record, or its fact cannot be placed in its relation's
    history (a single-valued value starting with another, `UnorderedValueError`, its cause).
    `line` is its line number."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line


class NotFoundError(MemsodaError, LookupError):
    """The referenced fact does not exist in the given dataset/project."""


class EmbeddingError(MemsodaError):
    """The embedder raised, timed out, or returned vectors of the wrong shape or with NaN."""


class ExtractionError(MemsodaError):
    """`remember`'s extractor raised or timed out, or returned output that is not the extraction
    schema (or, with `on_invalid="raise"`, an operation that failed its checks). Nothing was written.
    `rejected` holds the failed operations' reasons when that is the cause."""

    def __init__(self, message: str, *, rejected: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.rejected = rejected


class EmbedderMismatchError(MemsodaError):
    """The store holds vectors of another embedding model or dimension."""


class StoreError(MemsodaError):
    """The database failed to do what was asked; raised as is also when the server lacked a
    resource for the transaction (SQLSTATE class 53: its lock table full, memory, disk), the
    message saying which and what to do."""


class StoreUnavailableError(StoreError):
    """PostgreSQL could not be reached, rejected a new connection, or no pooled connection became
    free in time; the message says which."""


class StoreBusyError(StoreError):
    """PostgreSQL is up but ended the operation: a deadlock or a serialization failure (memsoda
    ran the operation again a few times first), a statement timeout or a lock timeout. Not an
    outage. `sqlstate` is PostgreSQL's code (40P01, 40001, 57014, 55P03); `retry_safe` is True when
    the operation committed nothing before it ended (its transaction rolled back whole), so calling
    it again cannot apply anything twice."""

    def __init__(self, message: str, *, sqlstate: str, retry_safe: bool) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.retry_safe = retry_safe


class ReadOnlyStoreError(StoreError):
    """The store is open read-only (`Memory.open(read_only=True)`, or a read-only session: a hot
    standby, a read replica, `default_transaction_read_only`): a write is refused before anything
    is sent. Also raised by a read-only open of a store that would need writing first (not created
    yet, or an older schema to upgrade): open it once read-write on the primary."""


class LayoutChangedError(StoreError):
    """The store's layout changed while this Memory was open (`memsoda distribute`, run by another
    process) and the operation could not be run with the new statements: nothing of it was kept.
    Memory reloads the store's layout when it notices the change and runs the operation once more
    with the new statements, so this is raised only when that run failed too and the layout had
    changed yet again (or for an operation given built, which cannot be built again, or an export
    that had already written lines); call it again."""


class SchemaError(StoreError):
    """The schema cannot be used by this version (newer version, pgvector missing)."""


class ConfigurationError(MemsodaError):
    """An option or environment variable has an invalid value."""


class EventLoopError(MemsodaError, RuntimeError):
    """An `AsyncMemory` was used in an event loop other than the one that opened it (each
    `asyncio.run` starts a new loop). Its connection pool runs tasks in that loop, so it cannot
    serve another: open the memory inside the coroutine that uses it. `close()` works from any
    loop, except while the opening loop still runs in another thread: close it there."""
