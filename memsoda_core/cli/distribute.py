"""`distribute`: make the store on a Citus coordinator distributed by tenant (`memsoda_core.distributed`)."""

from __future__ import annotations

from typing import Annotated

import typer

from memsoda_core.cli.common import JsonOpt, settings_of
from memsoda_core.cli.output import out, print_json
from memsoda_core.errors import ConfigurationError


def distribute(
    ctx: typer.Context,
    isolate: Annotated[
        list[str] | None, typer.Option("--isolate", help="A large dataset to move to a shard of its own (repeatable).")
    ] = None,
    shard_count: Annotated[
        int | None, typer.Option(min=1, help="Shards per table (default: the cluster's citus.shard_count).")
    ] = None,
    transfer_mode: Annotated[
        str, typer.Option(help="How --isolate moves rows: auto, force_logical or block_writes.")
    ] = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Distribute the store on a Citus coordinator (--dsn) by dataset: tables colocated, `meta` a
    reference table, recall's settings on every node. Idempotent; run `memsoda recall` once first
    if the store does not exist yet."""
    from memsoda_core.distributed import distribute as run

    settings = settings_of(ctx)
    if settings.dsn is None:
        raise ConfigurationError("distribute needs --dsn (or MEMSODA_DSN) of a Citus coordinator")
    done = run(
        settings.dsn, settings.schema, isolate=isolate or (), shard_count=shard_count, transfer_mode=transfer_mode
    )
    if as_json:
        print_json(
            {
                "distributed": list(done.distributed),
                "reference": list(done.reference),
                "unchanged": list(done.unchanged),
                "isolated": dict(done.isolated),
                "settings": dict(done.settings),
            }
        )
        return
    console = out()
    console.print(f"distributed by dataset: {', '.join(done.distributed) or 'nothing new'}")
    console.print(f"reference tables: {', '.join(done.reference) or 'nothing new'}")
    if done.unchanged:
        console.print(f"already on Citus: {', '.join(done.unchanged)}")
    for tenant, shard in done.isolated:
        console.print(f"dataset {tenant!r} has shard {shard} to itself")
    console.print("settings for every node: " + ", ".join(f"{name} = {value}" for name, value in done.settings))
