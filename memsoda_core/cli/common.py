"""What the commands share: the global settings, the embedder of a command, and the common options."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from memsoda_core.embedders import Embedder
from memsoda_core.embedders.choice import EmbedderSpec, RecordedSpace, build, check_space, choose
from memsoda_core.embedders.local import DEFAULT_LOCAL_MODEL

if TYPE_CHECKING:
    from memsoda_core.runner.target import Target

EMBEDDER_OPTION = "--embedder"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The global options, shared by every command through the click context."""

    dsn: str | None
    home: Path | None
    schema: str
    verbose: bool
    embedder: str | None = None
    """`--embedder`: a spec (local, openai, openai:MODEL) over MEMSODA_EMBEDDER and the store's model."""


def settings_of(ctx: typer.Context) -> Settings:
    obj = ctx.find_object(Settings)
    return obj if obj is not None else Settings(dsn=None, home=None, schema="memsoda", verbose=False)


def store_target(settings: Settings) -> Target:
    """The store of a command: `--dsn`, else the embedded server under the home (`--home` there also
    names where the embedding service runs, so both together are no conflict here)."""
    from memsoda_core.runner.target import resolve_target  # psycopg: loaded by the commands that use a store

    return resolve_target(settings.dsn, None if settings.dsn else settings.home)


def home_of(settings: Settings) -> Path:
    """The embedded server's home: --home / MEMSODA_HOME, else the user data directory."""
    from memsoda_core.server import default_home

    return (settings.home or default_home()).expanduser().resolve()


def command_embedder(settings: Settings, recorded: RecordedSpace | None) -> Embedder:
    """The embedder of a command on the store that records `recorded`: `--embedder`, else
    MEMSODA_EMBEDDER, else the store's model, else the environment's default (`embedders.choice`),
    checked against the store. The offline model comes from the embedding service of a running
    `memsoda server start` when it serves it, so the command loads no model."""
    option = (EMBEDDER_OPTION, settings.embedder) if settings.embedder else None
    choice = choose(recorded, option=option)
    assert choice.spec is not None
    embedder = _served(choice.spec, home_of(settings)) or _built(choice.spec, choice.dimensions)
    if recorded is not None:
        check_space(recorded, str(embedder.model), int(embedder.dimensions), choice.origin)
    return embedder


def _served(spec: EmbedderSpec, home: Path) -> Embedder | None:
    if spec.kind != "local" or spec.model != DEFAULT_LOCAL_MODEL:
        return None
    from memsoda_core import embed_service

    return embed_service.connect(home, spec.model)


def _built(spec: EmbedderSpec, dimensions: int | None) -> Embedder:
    return _local(spec.model) if spec.kind == "local" else build(spec, dimensions=dimensions)


@functools.cache
def _local(model: str) -> Embedder:
    """One local model per process (loading it takes seconds); an OpenAI client is cheap and
    follows the environment of each command."""
    return build(EmbedderSpec(kind="local", model=model))


def _nonblank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", callback=_nonblank, help="Tenant: the dataset name.")]
ProjectOpt = Annotated[str, typer.Option("--project", "-p", callback=_nonblank, help="Tenant: the project name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
