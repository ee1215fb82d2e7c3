"""`forget-source`: forget what `remember` learned from a thread or messages; `retention`: show or
set a dataset/project's maximum age of facts (`memsoda maintain` purges)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer
from rich.text import Text

from memsoda_core.cli.common import DatasetOpt, JsonOpt, ProjectOpt, settings_of
from memsoda_core.cli.output import out, print_json, table
from memsoda_core.cli.store import open_memory
from memsoda_core.forgetting.rules import PURGES


def forget_source(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    thread: Annotated[str | None, typer.Option("--thread", "-t", help="The thread to forget.")] = None,
    message: Annotated[
        list[str] | None, typer.Option("--message", "-m", help="A message id to forget (repeat for more).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Forget what was learned from a thread, or from messages: facts learned only there are
    deleted, facts also learned elsewhere keep their other sources."""
    what = " and ".join(
        part for part in (f"thread {thread!r}" if thread else "", f"messages {message}" if message else "") if part
    )
    if not yes:
        typer.confirm(f"Forget what {dataset}/{project} learned from {what or '?'}?", abort=True)
    with open_memory(settings_of(ctx), embeds=False) as memory:
        report = memory.forget_source(dataset=dataset, project=project, thread_id=thread, message_ids=message)
    if as_json:
        print_json(vars(report))
        return
    out().print(
        Text(
            f"deleted {report.facts_deleted} facts, {report.episodes} episodes and {report.items} items; "
            f"{report.facts_kept} facts keep their other sources",
            style="green",
        )
    )


def _days(value: float) -> timedelta:
    """`--max-age-days` as a timedelta: a usage error for what no timedelta holds (nan, inf, 1e308)."""
    try:
        return timedelta(days=value)
    except (ValueError, OverflowError):
        message = f"must be a number of days up to {timedelta.max.days:,}, got {value}"
        raise typer.BadParameter(message, param_hint="'--max-age-days'") from None


def retention(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    max_age_days: Annotated[
        float | None, typer.Option("--max-age-days", help="Keep facts this many days (omit to show the rules).")
    ] = None,
    purge: Annotated[str, typer.Option(help=f"What outlives the age: {' or '.join(PURGES)} facts.")] = "ended",
    predicate: Annotated[str | None, typer.Option(help="A rule for this predicate alone.")] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove the rule (of --predicate, else the scope's).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show or set how long a dataset/project keeps its facts; `memsoda maintain` purges."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        scope = {"dataset": dataset, "project": project}
        if remove:
            rules = memory.set_retention(**scope, max_age=None, predicate=predicate)
        elif max_age_days is not None:
            age = _days(max_age_days)
            rules = memory.set_retention(**scope, max_age=age, purge=purge, predicate=predicate)
        else:
            rules = memory.retention(**scope)
    rows = [(r.predicate or "*", r.max_age.total_seconds() / 86400, r.purge) for r in rules]
    if as_json:
        print_json([{"predicate": p, "max_age_days": d, "purge": u} for p, d, u in rows])
        return
    result = table()
    for name in ("predicate", "max age (days)", "purge"):
        result.add_column(name)
    for p, d, u in rows:
        result.add_row(Text(p), Text(f"{d:g}"), Text(u))
    out().print(result)
