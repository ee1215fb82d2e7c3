"""Statements compiled once to PostgreSQL's own form (`$1 .. $n`) and run as they are.

psycopg reads a statement's text for `%(name)s` placeholders at every execution, and caches that
reading for short statements only. A `Compiled` statement is read once, when it is built (the
builders that make them are memoized), and runs through psycopg's raw cursors, which send the
text unread; its parameters are picked from the operation's mapping by name, in order.

Compiling walks the composed statement: its SQL parts are read for placeholders (`%%` is a `%`),
while identifiers and literals are copied as they are, so a quoted name may hold any character.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from memsoda_core.store.params import BinaryList

_PLACEHOLDER = re.compile(rb"%(?:\((?P<name>[^)]+)\)(?P<format>.)|(?P<other>.|$))", re.DOTALL)


@dataclass(frozen=True)
class Compiled:
    """One statement as PostgreSQL reads it: `query` with `$n` placeholders, `names[n - 1]` the
    parameter each stands for, `binary[n - 1]` whether it was written `%(name)b` (sent in binary)."""

    query: bytes
    names: tuple[str, ...]
    binary: tuple[bool, ...]

    def bind(self, params: Mapping[str, Any] | tuple[Any, ...] | None) -> tuple[Any, ...]:
        """The values of `params` in placeholder order. A plain list at a binary placeholder goes as
        a `BinaryList`: a raw cursor chooses each value's format by its type alone."""
        if isinstance(params, tuple):
            raise TypeError("a compiled statement takes its parameters by name")
        params = params or {}
        try:
            values = [params[name] for name in self.names]
        except KeyError:
            missing = ", ".join(sorted(name for name in self.names if name not in params))
            raise psycopg.ProgrammingError(f"query parameter missing: {missing}") from None
        return tuple(
            BinaryList(value) if binary and type(value) is list else value
            for value, binary in zip(values, self.binary, strict=True)
        )

    def as_string(self, context: Any = None) -> str:
        """The text sent, as `sql.Composable.as_string` gives it (for logs and tests)."""
        return self.query.decode()

    def __str__(self) -> str:
        return self.as_string()


def compiled(statement: sql.Composable) -> Compiled:
    """`statement` compiled (see the module's docstring). Raises ValueError for a placeholder that
    is not `%(name)s` or `%(name)b`, or one name written with both."""
    chunks: list[bytes] = []
    names: dict[str, int] = {}
    binary: list[bool] = []
    for text, verbatim in _parts(statement):
        if verbatim:
            chunks.append(text)
            continue
        at = 0
        for match in _PLACEHOLDER.finditer(text):
            chunks.append(text[at : match.start()])
            at = match.end()
            if match["other"] == b"%":
                chunks.append(b"%")
                continue
            if match["name"] is None or match["format"] not in (b"s", b"b"):
                raise ValueError(f"a compiled statement takes %(name)s and %(name)b placeholders only: {match[0]!r}")
            name, is_binary = match["name"].decode(), match["format"] == b"b"
            if name not in names:
                names[name] = len(names) + 1
                binary.append(is_binary)
            elif binary[names[name] - 1] != is_binary:
                raise ValueError(f"placeholder {name!r} written both as %s and %b")
            chunks.append(b"$%d" % names[name])
        chunks.append(text[at:])
    return Compiled(b"".join(chunks), tuple(names), tuple(binary))


def _parts(statement: sql.Composable) -> Iterator[tuple[bytes, bool]]:
    """The composed pieces of `statement` in order, each with whether it is copied verbatim (a
    quoted identifier or literal) rather than read for placeholders (SQL text, a placeholder)."""
    if isinstance(statement, sql.Composed):
        for part in statement:
            yield from _parts(part)
    elif isinstance(statement, sql.SQL | sql.Placeholder):
        yield statement.as_bytes(None), False
    else:
        yield statement.as_bytes(None), True
