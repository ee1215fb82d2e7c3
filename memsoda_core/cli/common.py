"""What the commands share: the global settings, one embedder per process, and the common options."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from memsoda_core.embedders import Embedder, default_embedder


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The global options, shared by every command through the click context."""

    dsn: str | None
    home: Path | None
    schema: str
    verbose: bool


def settings_of(ctx: typer.Context) -> Settings:
    obj = ctx.find_object(Settings)
    return obj if obj is not None else Settings(dsn=None, home=None, schema="memsoda", verbose=False)


def home_of(settings: Settings) -> Path:
    """The embedded server's home: --home / MEMSODA_HOME, else the user data directory."""
    from memsoda_core.server import default_home

    return (settings.home or default_home()).expanduser().resolve()


@functools.cache
def shared_embedder() -> Embedder:
    """One embedder per process (loading the local model takes seconds)."""
    return default_embedder()


def _nonblank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


DatasetOpt = Annotated[str, typer.Option("--dataset", "-d", callback=_nonblank, help="Tenant: the dataset name.")]
ProjectOpt = Annotated[str, typer.Option("--project", "-p", callback=_nonblank, help="Tenant: the project name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
