"""`recall`, `add` and `forget`: read, write and delete facts in one dataset/project."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from memsoda_core.cli.common import DatasetOpt, JsonOpt, ProjectOpt, settings_of
from memsoda_core.cli.output import out, print_json, table, warn
from memsoda_core.cli.store import open_memory
from memsoda_core.fact_text import start_day
from memsoda_core.models import LITERAL, RecallResult, ScoredFact
from memsoda_core.options import RecallOptions
from memsoda_core.recall.plans import QUERY_SIGNALS
from memsoda_core.recall.signals import SIGNAL_NAMES
from memsoda_core.validation import parse_time, validate_fact

SIGNALS = SIGNAL_NAMES


def _rank_cell(scored: ScoredFact, signal: str, k: int | None = None) -> Text:
    rank = scored.ranks.get(signal)
    if rank is None:
        return Text("·", style="dim")
    style = "bold green" if k is None or rank <= k else "dim"
    return Text(str(rank), style=style)


def signal_table(facts: Sequence[ScoredFact], *, reasons: bool = True, highlight_within: int | None = None) -> Table:
    """Fact, fused score, 1-based rank per signal (· = not on that list) and, optionally, why."""
    used = [s for s in SIGNALS if any(s in f.ranks for f in facts)] or list(QUERY_SIGNALS)  # an empty table
    result = table()
    result.add_column("#", justify="right")
    result.add_column("fact", overflow="fold", ratio=3)
    result.add_column("score", justify="right")
    for name in used:
        result.add_column(name, justify="right")
    if reasons:
        result.add_column("why", overflow="fold", ratio=3, style="dim")
    for position, scored in enumerate(facts, start=1):
        row: list[Text] = [Text(str(position)), Text(scored.fact.text), Text(f"{scored.score:.4f}")]
        row += [_rank_cell(scored, s, highlight_within) for s in used]
        if reasons:
            row.append(Text("\n".join(f"{s}: {r}" for s, r in scored.reasons.items())))
        result.add_row(*row)
    return result


def _raw_table(facts: Sequence[ScoredFact]) -> Table:
    result = table()
    for name in ("id", "fact", "confidence", "valid", "source quote"):
        result.add_column(name, overflow="fold")
    for scored in facts:
        fact = scored.fact
        until = fact.invalid_at.date().isoformat() if fact.invalid_at else "present"
        result.add_row(
            Text(str(fact.id)),
            Text(fact.text),
            Text(f"{fact.confidence:g}"),
            Text(f"{start_day(fact.valid_at)} – {until}"),
            Text(fact.source_quote or "", style="italic"),
        )
    return result


def fusion_line(result: RecallResult) -> str:
    """How the memory fused the lists, for `--explain` (`RecallResult.fusion`)."""
    fusion = result.fusion
    if fusion is None:
        return "fusion: the options given"
    preset = fusion.preset.replace("_", "-")
    return f"fusion: the {preset} options for {', '.join(fusion.chosen)}: {fusion.reason}"


def _show_recall(result: RecallResult, scope: str, *, explain: bool, raw: bool) -> None:
    console = out()
    if result.degraded:
        warn(f"degraded: {result.degraded_reason}", soft_wrap=True)
    for part, message in result.errors.items():
        warn(f"{part} failed: {message}", soft_wrap=True)
    if result.scope_empty:
        warn(f"{scope} holds no facts: check the dataset and project names (`memsoda stats` lists them)")
        return
    if not result.context:
        warn("nothing matched")
        return
    console.print(Text(result.context), highlight=False, soft_wrap=True)
    if explain:
        console.print()
        console.print(signal_table(result.facts))
        if result.fusion is not None:
            console.print(Text(fusion_line(result)), highlight=False, soft_wrap=True)
    if raw:
        console.print()
        console.print(_raw_table(result.facts))


def recall(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    query: Annotated[
        str | None, typer.Argument(help="The message to recall for; omit for the most recent facts.")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Facts in the context (default 8).")] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="Recall as of a date or time (ISO-8601, e.g. 2025-01-31).")
    ] = None,
    known_at: Annotated[
        str | None,
        typer.Option("--known-at", help="Recall what memory knew at this time (ISO-8601; --as-of defaults to it)."),
    ] = None,
    include: Annotated[str, typer.Option(help="Extras, comma-separated: raw, episodes.")] = "",
    explain: Annotated[bool, typer.Option("--explain", help="Show each fact's rank per signal and why.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Recall the facts that matter for QUERY and print the context block for a prompt."""
    extras = [part.strip() for part in include.split(",") if part.strip()]
    if "synthesis" in extras:
        raise typer.BadParameter(
            "synthesis is available from Python only (Memory.open(synthesizer=...))", param_hint="--include"
        )
    # Check what can be checked without the store, so mistakes fail before a model loads.
    parse_time(as_of, "as_of")
    parse_time(known_at, "known_at")
    if k is not None:
        RecallOptions(facts_in_context=k)
    with open_memory(settings_of(ctx)) as memory:
        result = memory.recall(
            query,
            dataset=dataset,
            project=project,
            facts_in_context=k,
            as_of=as_of,
            known_at=known_at,
            include=extras,
        )
    if as_json:
        print_json(result.to_dict())
        return
    _show_recall(result, f"{dataset}/{project}", explain=explain, raw="raw" in extras)


def add(
    ctx: typer.Context,
    subject: Annotated[str, typer.Option("--subject", "-s", help="Subject entity, e.g. user.")],
    predicate: Annotated[str, typer.Option("--predicate", "-P", help="Predicate, e.g. 'favourite show is'.")],
    obj: Annotated[str, typer.Option("--object", "-o", help="Object: an entity name, or a value with --literal.")],
    dataset: DatasetOpt,
    project: ProjectOpt,
    subject_type: Annotated[str, typer.Option(help="Type of the subject entity.")] = "OTHER",
    object_type: Annotated[str, typer.Option(help="Type of the object entity.")] = "OTHER",
    literal: Annotated[bool, typer.Option("--literal", help="The object is a value, not an entity.")] = False,
    mention: Annotated[
        list[str] | None, typer.Option("--mention", "-m", help="Another entity the fact touches (repeatable).")
    ] = None,
    anchor: Annotated[
        str | None, typer.Option(help="Anchor entity (default: the object entity, else the subject).")
    ] = None,
    valid_at: Annotated[str | None, typer.Option(help="True from (ISO-8601; default: no known start).")] = None,
    invalid_at: Annotated[str | None, typer.Option(help="True until (ISO-8601; default: still true).")] = None,
    confidence: Annotated[float, typer.Option(help="0..1; below 0.5 it is stored but not recalled.")] = 1.0,
    quote: Annotated[str | None, typer.Option(help="The words the fact came from.")] = None,
) -> None:
    """Store one fact."""
    fact: dict[str, Any] = {
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "subject_type": subject_type,
        "object_type": LITERAL if literal else object_type,
        "mentions": list(mention or ()),
        "anchor": anchor,
        "valid_at": valid_at,
        "invalid_at": invalid_at,
        "confidence": confidence,
        "source_quote": quote,
    }
    validate_fact(fact)  # fails fast, before a model loads
    with open_memory(settings_of(ctx)) as memory:
        (fact_id,) = memory.add_facts([fact], dataset=dataset, project=project)
    out().print(Text(f"added fact {fact_id} to {dataset}/{project}", style="green"))


def forget(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    entity: Annotated[str | None, typer.Option(help="Forget only this entity and its facts.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an entity's facts, or a whole dataset/project."""
    what = f"entity {entity!r} in {dataset}/{project}" if entity else f"everything in {dataset}/{project}"
    if not yes:
        typer.confirm(f"Delete {what}?", abort=True)
    with open_memory(settings_of(ctx), embeds=False) as memory:
        count = memory.forget(dataset=dataset, project=project, entity=entity)
    out().print(Text(f"deleted {count} facts ({what})", style="green"))
