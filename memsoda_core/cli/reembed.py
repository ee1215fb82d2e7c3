"""`reembed`: move the store to another embedding model online (`Memory.reembed`)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from memsoda_core.cli.common import JsonOpt, command_embedder, settings_of
from memsoda_core.cli.output import out, print_json
from memsoda_core.cli.store import open_memory
from memsoda_core.reembed.operation import DEFAULT_BATCH_SIZE


def reembed(
    ctx: typer.Context,
    embedder: Annotated[
        str | None,
        typer.Option("--embedder", "-e", help="The new model: local, openai or openai:MODEL."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Rows per embedding call and transaction.")] = DEFAULT_BATCH_SIZE,
    abandon: Annotated[bool, typer.Option("--abandon", help="Drop a re-embed in progress instead.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Re-embed every fact, entity name and episode with another model, then switch the store to
    it in one transaction. Recall and writes go on meanwhile (on the old model until the switch);
    after a crash or Ctrl-C, run it again to resume. Other processes must then reopen the store
    with the new model."""
    settings = settings_of(ctx)
    if not abandon and not embedder:
        raise typer.BadParameter("name the new model: --embedder local|openai|openai:MODEL", param_hint="--embedder")
    # The store is opened on its own model without loading it: a re-embed embeds with the new one only.
    with open_memory(settings, embeds=False) as memory:
        if abandon:
            dropped = memory.abandon_reembed()
            if as_json:
                print_json({"abandoned": dropped})
            else:
                out().print("re-embed abandoned" if dropped else "no re-embed in progress")
            return
        new = command_embedder(dataclasses.replace(settings, embedder=embedder), None)
        report = memory.reembed(new, batch_size=batch_size, progress=progress and not as_json)
    if as_json:
        print_json(dataclasses.asdict(report))
        return
    if not report.switched:
        out().print(f"the store already holds {report.model!r} ({report.dimensions} dimensions): nothing to do")
        return
    resumed = " (resumed)" if report.resumed else ""
    out().print(
        f"re-embedded {report.embedded + report.caught_up:,} rows{resumed}, {report.caught_up:,} of them written "
        f"during the run; the store now holds {report.model!r} ({report.dimensions} dimensions); "
        f"indexes: {', '.join(report.indexes) or 'none'}"
    )
