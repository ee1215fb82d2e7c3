"""`demo`: load the bundled sample memory and show what each recall signal contributes."""

from __future__ import annotations

from typing import Annotated

import typer

from memsoda_core.cli.common import settings_of, shared_embedder
from memsoda_core.cli.output import out


def demo(
    ctx: typer.Context,
    reload: Annotated[bool, typer.Option("--reload", help="Reload the sample even if it is there.")] = False,
) -> None:
    """Load the bundled sample memory and show what each recall signal contributes."""
    from memsoda_core.demo import run_demo

    settings = settings_of(ctx)
    ok = run_demo(
        dsn=settings.dsn,
        home=settings.home,
        schema=settings.schema,
        embedder=shared_embedder(),
        console=out(),
        reload=reload,
    )
    if not ok:
        raise typer.Exit(1)
