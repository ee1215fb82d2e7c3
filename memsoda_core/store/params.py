"""Array parameters with one PostgreSQL type whatever they hold, sent in binary.

psycopg types a list by its elements: an empty list goes out untyped, a list of ints as int2[],
int4[] or int8[] by its largest value. It keys prepared statements on the parameter types, so a
statement kept prepared would be prepared again for each variant, each copy holding its own plan.
These lists always go out as text[] and bigint[]; binary also skips the text format's quoting of
every element in Python."""

from __future__ import annotations

from typing import Any

from psycopg import adapters
from psycopg.postgres import types
from psycopg.types.array import ListBinaryDumper


class TextArray(list[str]):
    """A list of str sent as text[]."""


class BigintArray(list[int]):
    """A list of int sent as bigint[]."""


class _TextArrayDumper(ListBinaryDumper):
    oid = types["text"].array_oid
    element_oid = types["text"].oid


class _BigintArrayDumper(ListBinaryDumper):
    oid = types["int8"].array_oid
    element_oid = types["int8"].oid


adapters.register_dumper(TextArray, _TextArrayDumper)
adapters.register_dumper(BigintArray, _BigintArrayDumper)


class BinaryList(list[Any]):
    """A list sent as a binary array of its elements' type: what `%(name)b` asks for, for a raw
    cursor (`runner.compiled`), which picks each value's format by its type."""


adapters.register_dumper(BinaryList, ListBinaryDumper)
