"""`facts list|show|history`, `invalidate` and `supersede`: stored facts read as data, ended, replaced."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.text import Text

from memsoda_core.cli.common import DatasetOpt, JsonOpt, ProjectOpt, settings_of
from memsoda_core.cli.output import out, print_json, table
from memsoda_core.cli.store import open_memory
from memsoda_core.fact_text import start_day
from memsoda_core.models import LITERAL, Fact

facts_app = typer.Typer(help="Read stored facts: list, show one, its history.", no_args_is_help=True)

FactIdArg = Annotated[int, typer.Argument(help="The fact's id.")]


def _when(value: Any) -> str:
    return value.date().isoformat() if value is not None else "-"


def _show(facts: Sequence[Fact], as_json: bool, next_after: int | None = None) -> None:
    if as_json:
        print_json([dataclasses.asdict(fact) for fact in facts])
        return
    grid = table()
    for column in ("id", "fact", "valid", "confidence", "seen", "superseded by"):
        grid.add_column(column)
    for fact in facts:
        grid.add_row(
            str(fact.id),
            fact.text,
            f"{start_day(fact.valid_at)} – {_when(fact.invalid_at) if fact.invalid_at else 'present'}",
            f"{fact.confidence:.2f}",
            str(fact.times_seen),
            str(fact.superseded_by or ""),
        )
    out().print(grid)
    if next_after is not None:
        out().print(Text(f"more: --after {next_after}", style="dim"))


@facts_app.command("list")
def list_(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    subject: Annotated[str | None, typer.Option(help="Only facts about this subject.")] = None,
    predicate: Annotated[str | None, typer.Option(help="Only facts with this predicate.")] = None,
    entity: Annotated[str | None, typer.Option(help="Only facts touching this entity.")] = None,
    status: Annotated[str, typer.Option(help="live, ended or all (at --as-of).")] = "live",
    as_of: Annotated[
        str | None, typer.Option(help="The time status is read at (ISO-8601; default --known-at, else now).")
    ] = None,
    known_at: Annotated[
        str | None, typer.Option("--known-at", help="Only what memory knew at this time, as it knew it (ISO-8601).")
    ] = None,
    limit: Annotated[int, typer.Option(help="Facts per page.")] = 50,
    after: Annotated[int | None, typer.Option(help="The cursor a previous page printed.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List a dataset/project's facts in id order, a page at a time."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        page = memory.list_facts(
            dataset=dataset,
            project=project,
            subject=subject,
            predicate=predicate,
            entity=entity,
            status=status,
            as_of=as_of,
            known_at=known_at,
            limit=limit,
            after=after,
        )
    _show(page.facts, as_json, page.next_after)


@facts_app.command("show")
def show(
    ctx: typer.Context, fact_id: FactIdArg, dataset: DatasetOpt, project: ProjectOpt, as_json: JsonOpt = False
) -> None:
    """Show one fact."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        fact = memory.get_fact(fact_id, dataset=dataset, project=project)
    _show([fact], as_json)


@facts_app.command("history")
def history(
    ctx: typer.Context, fact_id: FactIdArg, dataset: DatasetOpt, project: ProjectOpt, as_json: JsonOpt = False
) -> None:
    """Show a fact's supersede chain, oldest first."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        chain = memory.history(fact_id, dataset=dataset, project=project)
    _show(chain, as_json)


def invalidate(
    ctx: typer.Context,
    fact_id: FactIdArg,
    dataset: DatasetOpt,
    project: ProjectOpt,
    at: Annotated[str | None, typer.Option(help="No longer true from (ISO-8601; default now).")] = None,
) -> None:
    """End a live fact."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        memory.invalidate(fact_id, dataset=dataset, project=project, at=at)
    out().print(Text(f"ended fact {fact_id} in {dataset}/{project}", style="green"))


def supersede(
    ctx: typer.Context,
    fact_id: FactIdArg,
    dataset: DatasetOpt,
    project: ProjectOpt,
    obj: Annotated[str, typer.Option("--object", "-o", help="The new object (value or entity name).")],
    subject: Annotated[
        str | None, typer.Option("--subject", "-s", help="New subject (default: the old one's).")
    ] = None,
    predicate: Annotated[
        str | None, typer.Option("--predicate", "-P", help="New predicate (default: the old).")
    ] = None,
    literal: Annotated[
        bool | None, typer.Option("--literal/--entity", help="The new object is a value / an entity.")
    ] = None,
    valid_at: Annotated[
        str | None, typer.Option(help="True from (ISO-8601; default now, when memory learns it).")
    ] = None,
) -> None:
    """Replace a live fact by a new one: the old one ends where the new one starts."""
    with open_memory(settings_of(ctx)) as memory:
        old = memory.get_fact(fact_id, dataset=dataset, project=project)
        is_literal = old.object_type == LITERAL if literal is None else literal
        new = {
            "subject": subject or old.subject,
            "predicate": predicate or old.predicate,
            "object": obj,
            "object_type": LITERAL if is_literal else (old.object_type if old.object_type != LITERAL else "OTHER"),
            "valid_at": valid_at,
        }
        new_id = memory.supersede(fact_id, new, dataset=dataset, project=project)
    out().print(Text(f"fact {new_id} supersedes fact {fact_id} in {dataset}/{project}", style="green"))
