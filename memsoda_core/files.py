"""The files and terminals the public API reads and writes: JSONL sources and sinks, progress bars."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

from memsoda_core.errors import ImportFormatError

T = TypeVar("T")

logger = logging.getLogger(__name__)


@contextmanager
def progress_callback(
    total: int, enabled: bool, description: str = "importing"
) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr advanced by the returned callback, or None when disabled."""
    if not enabled or total == 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


BOM = "\ufeff"
"""A byte order mark, as a decoded text's first character."""


def read_jsonl(source: str | os.PathLike[str] | TextIO) -> list[str]:
    """All lines of a JSONL file path or open text file, a leading byte order mark dropped (editors
    on Windows write one). A path is read as UTF-8: a line that is not is an `ImportFormatError`
    naming it, before anything is parsed; a path that cannot be opened raises `open`'s OSError."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as handle:
            lines = [_utf8(line, number) for number, line in enumerate(handle.read().splitlines(keepends=True), 1)]
    else:
        lines = source.readlines()
    if lines and lines[0].startswith(BOM):
        lines[0] = lines[0][len(BOM) :]
    return lines


def _utf8(line: bytes, number: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"not UTF-8 text ({exc.reason} at byte {exc.start} of the line)", line=number) from None


@contextmanager
def open_sink(target: str | os.PathLike[str] | TextIO) -> Iterator[TextIO]:
    """Write to a path (created, utf-8) or to an already open text file."""
    if isinstance(target, str | os.PathLike):
        with open(target, "w", encoding="utf-8") as handle:
            yield handle
    else:
        yield target
