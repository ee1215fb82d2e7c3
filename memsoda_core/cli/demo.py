"""`demo`: load the bundled sample memory and show what each recall signal contributes."""

from __future__ import annotations

from typing import Annotated

import typer

from memsoda_core.cli.common import command_embedder, settings_of, store_target
from memsoda_core.cli.output import out


def demo(
    ctx: typer.Context,
    reload: Annotated[bool, typer.Option("--reload", help="Reload the sample even if it is there.")] = False,
) -> None:
    """Load the bundled sample memory and show what each recall signal contributes."""
    from memsoda_core.demo import run_demo
    from memsoda_core.ops.opening import recorded_space
    from memsoda_core.runner.once import run_once
    from memsoda_core.runner.target import release_target

    settings = settings_of(ctx)
    target = store_target(settings)
    try:
        embedder = command_embedder(settings, run_once(target.dsn, recorded_space(settings.schema)))
        ok = run_demo(
            dsn=settings.dsn,
            home=settings.home,
            schema=settings.schema,
            embedder=embedder,
            console=out(),
            reload=reload,
        )
    finally:
        release_target(target)
    if not ok:
        raise typer.Exit(1)
