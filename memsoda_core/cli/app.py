"""The Typer app: global options, the commands in the order `memsoda --help` lists them, and the
handling that turns memsoda's documented errors into one red line and exit status 1."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from memsoda_core.cli import demo, distribute, doctor, facts, jsonl, lifetime, profile, recall, reembed, server, stats
from memsoda_core.cli.common import Settings
from memsoda_core.cli.output import err, one_line
from memsoda_core.errors import MemsodaError


def _report(exc: BaseException, verbose: bool) -> None:
    console = err()
    if verbose:
        console.print(Text("".join(traceback.format_exception(exc)).rstrip(), style="dim"), soft_wrap=True)
    message = one_line(str(exc)) or type(exc).__name__
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
    help="Long-term memory for LLM agents: facts in PostgreSQL + pgvector, recalled by fused signals"
    " (vector, entity anchor, keyword, date window, conversation).",
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
    embedder: Annotated[
        str | None,
        typer.Option(
            "--embedder",
            help="The embedding model: local (the offline all-MiniLM-L6-v2), openai (MEMSODA_OPENAI_MODEL, default "
            "text-embedding-3-small) or openai:MODEL. Default: MEMSODA_EMBEDDER, else the model the store records, "
            "else (a new store) openai when OPENAI_API_KEY or OPENAI_BASE_URL is set, else local.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks of errors.")] = False,
) -> None:
    ctx.obj = Settings(**_store_options(ctx, dsn, home), schema=schema, verbose=verbose, embedder=embedder or None)


def _from_environment(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)  # typer's own copy of click's enum: compared by name
    return source is not None and source.name == "ENVIRONMENT"


def _store_options(ctx: typer.Context, dsn: str | None, home: Path | None) -> dict[str, Any]:
    """`--dsn` and `--home`: `--home` given on the command line beats `MEMSODA_DSN` (the command line
    beats the environment). Both kept otherwise: the DSN is the store, the home where the
    embedding service runs (`common.store_target`)."""
    dsn = dsn or None
    if dsn is not None and home is not None and _from_environment(ctx, "dsn") and not _from_environment(ctx, "home"):
        dsn = None
    return {"dsn": dsn, "home": home}


app.command()(demo.demo)
app.command()(recall.recall)
app.command()(recall.add)
app.command()(profile.profile)
app.command("import")(jsonl.import_)
app.command()(jsonl.export)
app.command()(recall.forget)
app.command("forget-source")(lifetime.forget_source)
app.command()(lifetime.retention)
app.add_typer(facts.facts_app, name="facts")
app.command()(facts.invalidate)
app.command()(facts.supersede)
app.command()(stats.stats)
app.command()(stats.maintain)
app.command()(reembed.reembed)
app.command()(doctor.doctor)
app.command()(distribute.distribute)

server_app.command("start")(server.server_start)
server_app.command("hold", hidden=True)(server.server_hold)
server_app.command("stop")(server.server_stop)
server_app.command("status")(server.server_status_command)
