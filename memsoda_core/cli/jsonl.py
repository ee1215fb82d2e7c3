"""`import` and `export`: a dataset/project's facts, episodes and items as JSON lines, all or nothing."""

from __future__ import annotations

import io
import os
import sys
import tempfile
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.text import Text

from memsoda_core.cli.common import DatasetOpt, ProjectOpt, settings_of
from memsoda_core.cli.output import err, out, spinner, warn
from memsoda_core.cli.store import open_memory
from memsoda_core.errors import ValidationError
from memsoda_core.files import read_jsonl
from memsoda_core.memory import Memory
from memsoda_core.ops.transfer import parse_jsonl


class OnError(StrEnum):
    """What `import` does with a bad line."""

    RAISE = "raise"
    SKIP = "skip"


_SHOWN_ERRORS = 20
_PROGRESS_FROM = 200
"""Files with at least this many records get a progress bar."""


def import_(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="JSON lines, as written by export.")
    ],
    dataset: DatasetOpt,
    project: ProjectOpt,
    on_error: Annotated[
        OnError, typer.Option(help="raise: reject the file at the first bad line; skip: import the rest.")
    ] = OnError.RAISE,
    batch_size: Annotated[int, typer.Option(help="Facts embedded per call.")] = 500,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on long files.")] = True,
    rebuild_index: Annotated[
        bool | None,
        typer.Option(
            "--rebuild-index/--keep-index",
            help="Into a scope with its own vector index: drop it and build it once after the rows"
            " (faster; vector search is exact meanwhile), or keep it. Default: rebuild when the file"
            " brings at least 1/4 as many facts as the scope holds.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Import facts, episodes and items from a JSONL file in one transaction (all or nothing)."""
    lines = read_jsonl(file)
    records = sum(1 for line in lines if line.strip())
    try:
        if on_error is OnError.RAISE:
            parse_jsonl(lines, now=datetime.now(UTC), on_error="raise")  # fails before a model loads
        with open_memory(settings_of(ctx)) as memory:
            report = memory.import_jsonl(
                io.StringIO("".join(lines)),
                dataset=dataset,
                project=project,
                on_error=on_error.value,
                batch_size=batch_size,
                progress=progress and records >= _PROGRESS_FROM,
                rebuild_index=rebuild_index,
            )
    except ValidationError as exc:
        raise type(exc)(f"{exc} (nothing was imported)") from exc
    for number, message in report.errors[:_SHOWN_ERRORS]:
        text = message if message.startswith(f"line {number}:") else f"line {number}: {message}"
        warn(f"skipped {text}", soft_wrap=True)
    if report.skipped > _SHOWN_ERRORS:
        warn(f"... and {report.skipped - _SHOWN_ERRORS} more bad lines")
    out().print(
        Text(
            f"imported {report.facts} facts"
            + (f", {report.episodes} episodes and {report.items} items" if report.items else "")
            + ("" if report.items else f" and {report.episodes} episodes")
            + f" into {dataset}/{project}"
            f" (new: {report.facts_new} facts, {report.episodes_new} episodes;"
            f" already stored: {report.facts_merged} facts merged, {report.episodes_present} episodes)"
            + (f"; skipped {report.skipped} bad lines" if report.skipped else ""),
            style="green",
        )
    )


def export(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="Output file ('-' for standard output).")],
    dataset: DatasetOpt,
    project: ProjectOpt,
) -> None:
    """Export a dataset/project's facts, episodes and items as JSON lines (written whole or not at all)."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        if file == "-":
            count = memory.export_jsonl(sys.stdout, dataset=dataset, project=project)
            err().print(Text(f"exported {count} lines", style="green"))
            return
        target = Path(file)
        if not target.resolve().parent.is_dir():
            raise typer.BadParameter(f"directory {target.resolve().parent} does not exist", param_hint="FILE")
        with spinner(f"exporting to {target}"):
            count = _export_atomically(memory, target, dataset, project)
    out().print(Text(f"exported {count} lines from {dataset}/{project} to {target}", style="green"))


def _export_atomically(memory: Memory, target: Path, dataset: str, project: str) -> int:
    """Write beside `target`, then rename over it: a failed export leaves no partial file."""
    directory = target.resolve().parent
    handle: TextIO
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            count = memory.export_jsonl(handle, dataset=dataset, project=project)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count
