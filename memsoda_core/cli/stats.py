"""`stats`: facts, live facts, entities and episodes per dataset/project; `maintain`: statistics
and the indexes of large datasets/projects."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from memsoda_core.cli.common import JsonOpt, settings_of
from memsoda_core.cli.output import out, print_json, table, warn
from memsoda_core.cli.store import open_memory

_COLUMNS = ("dataset", "project", "facts", "live_facts", "entities", "episodes")


def stats(
    ctx: typer.Context,
    dataset: Annotated[str | None, typer.Option("--dataset", "-d", help="Only this dataset.")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p", help="Only this project.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Facts, live facts, entities and episodes per dataset/project."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        rows = memory.stats(dataset=dataset, project=project)
        legacy = memory.info.legacy_starts_through
    if legacy is not None and not as_json:
        out().print(
            Text(
                f"facts up to id {legacy} were written before schema v6: a start given to them and one "
                "defaulted to the time of the write look the same (see README, Time)",
                style="dim",
            ),
            soft_wrap=True,
        )
    if as_json:
        print_json(rows)
        return
    if not rows:
        warn("no data yet: try `memsoda demo` or `memsoda import FILE.jsonl`")
        return
    result = table()
    for name in _COLUMNS:
        result.add_column(name.replace("_", " "), justify="left" if name in ("dataset", "project") else "right")
    for row in rows:
        result.add_row(*(Text(str(row[name])) for name in _COLUMNS))
    out().print(result)


def maintain(
    ctx: typer.Context,
    as_json: JsonOpt = False,
    retention: Annotated[bool, typer.Option(help="Purge what the retention rules have outlived first.")] = True,
) -> None:
    """Purge the facts retention rules have outlived (`memsoda retention`), repair single-valued
    relations whose values overlap (stores written before that fix), refresh statistics and build
    the indexes that large datasets/projects lack (after loading rows around memsoda, e.g.
    with COPY). Writes through memsoda build them on their own."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        purged = memory.apply_retention() if retention else None
        report = memory.maintain(retention=False)
        threshold = memory.info.tenant_index_min_facts
    built, repaired, left = list(report.indexes), report.overlaps_repaired, report.overlaps_left
    if as_json:
        facts = None if purged is None else {"facts": purged.facts, "items": purged.items}
        print_json(
            {
                "built": built,
                "tenant_index_min_facts": threshold,
                "purged": facts,
                "overlaps_repaired": repaired,
                "overlaps_left": left,
            }
        )
        return
    if purged is not None:
        out().print(f"retention: purged {purged.facts} facts and {purged.items} items")
    if repaired:
        out().print(f"single-valued relations: ended {repaired} fact(s) where the next fact starts")
    if left:
        out().print(
            f"single-valued relations: left {left} fact(s) starting at the same instant as another "
            "(no order; their ids are logged): end or forget one"
        )
    if not built:
        out().print(f"statistics refreshed; every dataset/project of {threshold:,}+ facts has its indexes")
        return
    out().print(f"statistics refreshed; built {len(built)} index(es): {', '.join(built)}")
