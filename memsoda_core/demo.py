"""`memsoda demo`: load the bundled sample memory and show each recall signal earning its place.

The sample is Maya's memory (`data/sample.jsonl`: 86 facts over 58 entities with validity intervals,
a few ended, a few below the confidence floor, source quotes and three episodes) and, as a second
tenant with overlapping entity names, Sam's (`data/sample-sam.jsonl`). Loading is idempotent: a
scope that already holds the sample's counts is left alone, anything else is replaced.

Every claim the demo makes is checked against the ranks of that very run and printed with ✓ or ✗,
so what it shows is what happened.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memsoda_core.demo_learning import show_learning
from memsoda_core.embedders import Embedder
from memsoda_core.memory import Memory
from memsoda_core.models import RecallResult, ScoredFact
from memsoda_core.recall.plans import QUERY_SIGNALS

DEMO_K = 5
"""Facts per context in the demo (the library's default is 8), to keep the screen short."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """A bundled JSONL file and the (dataset, project) the demo loads it into."""

    file: str
    dataset: str
    project: str
    who: str

    def lines(self) -> list[str]:
        """The file's lines."""
        path = resources.files("memsoda_core") / "data" / self.file
        return path.read_text(encoding="utf-8").splitlines(keepends=True)

    def records(self) -> list[dict[str, Any]]:
        """The file's records, parsed."""
        return [json.loads(line) for line in self.lines() if line.strip()]

    def counts(self) -> tuple[int, int]:
        """(facts, episodes) in the file."""
        records = self.records()
        episodes = sum(1 for r in records if r.get("kind") == "episode")
        return len(records) - episodes, episodes


MAYA = Sample(file="sample.jsonl", dataset="demo-maya", project="assistant", who="Maya")
SAM = Sample(file="sample-sam.jsonl", dataset="demo-sam", project="assistant", who="Sam")
SAMPLES = (MAYA, SAM)


def _counted(facts: int, episodes: int) -> str:
    return f"{facts} facts, {episodes} episode{'' if episodes == 1 else 's'}"


def load_samples(memory: Memory, *, reload: bool = False) -> list[str]:
    """Put each sample in its scope unless it is already there; returns one line per sample."""
    lines: list[str] = []
    for sample in SAMPLES:
        facts, episodes = sample.counts()
        where = f"{sample.dataset}/{sample.project}"
        rows = memory.stats(dataset=sample.dataset, project=sample.project)
        if not reload and rows and (rows[0]["facts"], rows[0]["episodes"]) == (facts, episodes):
            lines.append(f"{sample.who}'s memory is already in {where}: {_counted(facts, episodes)}")
            continue
        memory.forget(dataset=sample.dataset, project=sample.project)
        report = memory.import_jsonl(
            io.StringIO("".join(sample.lines())), dataset=sample.dataset, project=sample.project
        )
        lines.append(f"loaded {sample.who}'s memory into {where}: {_counted(report.facts, report.episodes)}")
    return lines


# --- the examples ---------------------------------------------------------------------------------


def find(result: RecallResult, text: str) -> tuple[int, ScoredFact] | None:
    """The 1-based position and scored fact whose text is `text`, if recalled."""
    for position, scored in enumerate(result.facts, start=1):
        if scored.fact.text == text:
            return position, scored
    return None


Check = Callable[[RecallResult, RecallResult | None], bool]


@dataclass(frozen=True, kw_only=True)
class Example:
    """One recall of the demo, what it should teach, and the claim checked against its ranks."""

    title: str
    sample: Sample
    query: str
    lesson: str
    spotlight: str
    claim: str
    holds: Check
    as_of: str | None = None
    include: tuple[str, ...] = ()


def _bridge(result: RecallResult, _: RecallResult | None) -> bool:
    hit = find(result, "user favourite show is breaking bad")
    return hit is not None and hit[0] <= DEMO_K and "anchor" in hit[1].ranks and "keyword" not in hit[1].ranks


def _keyword(result: RecallResult, _: RecallResult | None) -> bool:
    hit = find(result, "user wifi network is called kreuzberg-mesh-7731")
    if hit is None:
        return False
    position, scored = hit
    return position == 1 and scored.ranks.get("keyword") == 1 and scored.ranks.get("vector", DEMO_K + 1) > DEMO_K


def _paraphrase(result: RecallResult, _: RecallResult | None) -> bool:
    hit = find(result, "user is allergic to peanuts")
    return hit is not None and hit[0] == 1 and set(hit[1].ranks) == {"vector"}


def _as_of(then: RecallResult, now: RecallResult | None) -> bool:
    lisbon, berlin = "user lives in lisbon", "user lives in berlin"
    return (
        now is not None
        and find(then, lisbon) is not None
        and find(then, berlin) is None
        and find(now, berlin) is not None
        and find(now, lisbon) is None
    )


def _isolation(result: RecallResult, _: RecallResult | None) -> bool:
    own = all(scored.fact.dataset == SAM.dataset for scored in result.facts)
    return (
        own
        and find(result, "user favourite show is the crown") is not None
        and find(result, "user favourite show is breaking bad") is None
    )


EXAMPLES = (
    Example(
        title="The anchor bridge",
        sample=MAYA,
        query="anything good on Netflix tonight?",
        lesson="No word links this message to Maya's favourite show, so keyword cannot see it. 'netflix' is an "
        "entity in her graph: the anchor signal takes every fact touching it, then one hop further through "
        "'breaking bad'. Whether the vector sees the link depends on what the model happens to know.",
        spotlight="user favourite show is breaking bad",
        claim="the anchor signal reaches her favourite show; keyword does not",
        holds=_bridge,
        include=("episodes",),
    ),
    Example(
        title="An exact number",
        sample=MAYA,
        query="what was 7731 again?",
        lesson="Embeddings blur numbers and codes. Full-text search matches '7731' exactly.",
        spotlight="user wifi network is called kreuzberg-mesh-7731",
        claim=f"keyword ranks it first and puts it on top; the vector alone ranks it below the top {DEMO_K}",
        holds=_keyword,
    ),
    Example(
        title="A paraphrase",
        sample=MAYA,
        query="which snacks are safe for me?",
        lesson="No shared word and no entity named: only the vector sees that snacks and an allergy belong together.",
        spotlight="user is allergic to peanuts",
        claim="found first, by the vector signal alone",
        holds=_paraphrase,
    ),
    Example(
        title="Point in time",
        sample=MAYA,
        query="where do I live?",
        lesson="Facts carry validity intervals. Maya moved to Berlin in April 2025; as_of asks what was true then.",
        spotlight="user lives in lisbon",
        claim="as of 2024-06-01 she lives in Lisbon; today, in Berlin (never both)",
        holds=_as_of,
        as_of="2024-06-01",
    ),
    Example(
        title="Another tenant",
        sample=SAM,
        query="anything good on Netflix tonight?",
        lesson="Sam's memory names the same entities (netflix, breaking bad, lisbon) in another dataset. "
        "Each (dataset, project) sees only its own rows.",
        spotlight="user favourite show is the crown",
        claim="only Sam's facts: his favourite show, not Maya's",
        holds=_isolation,
    ),
)


# --- printing -------------------------------------------------------------------------------------


def _rank(scored: ScoredFact, signal: str) -> Text:
    rank = scored.ranks.get(signal)
    if rank is None:
        return Text("·", style="dim")
    return Text(str(rank), style="bold green" if rank <= DEMO_K else "dim")


def signal_table(result: RecallResult, spotlight: str) -> Table:
    """Fused position, fact, and its 1-based rank on each signal's list (green: within the top k)."""
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right")
    table.add_column("fact", overflow="fold")
    for signal in QUERY_SIGNALS:
        table.add_column(signal, justify="right")
    table.add_column("fused", justify="right")
    for position, scored in enumerate(result.facts, start=1):
        style = "bold" if scored.fact.text == spotlight else ""
        table.add_row(
            Text(str(position)),
            Text(scored.fact.text, style=style),
            *(_rank(scored, signal) for signal in QUERY_SIGNALS),
            Text(f"{scored.score:.4f}"),
        )
    return table


def spotlight_line(result: RecallResult, text: str) -> Text:
    """Where `text` landed and what each signal said about it."""
    hit = find(result, text)
    if hit is None:
        return Text(f"'{text}' was not recalled", style="yellow")
    position, scored = hit
    parts = []
    for signal in QUERY_SIGNALS:
        rank = scored.ranks.get(signal)
        if rank is None:
            parts.append(f"{signal} —")
        else:
            reason = scored.reasons[signal]
            parts.append(f"{signal} #{rank} ({reason})")
    return Text(f"'{text}' is #{position}: " + " · ".join(parts))


def _in_words(count: int) -> str:
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[count] if count < len(words) else str(count)


def _verdict(ok: bool, claim: str) -> Text:
    return Text("✓ " if ok else "✗ ", style="bold green" if ok else "bold red") + Text(
        claim if ok else f"did not hold here: {claim}"
    )


def _show(console: Console, number: int, example: Example, result: RecallResult, now: RecallResult | None) -> bool:
    console.rule(Text(f"{number}. {example.title}", style="bold"), align="left")
    asked = f'{example.sample.who} asks: "{example.query}"'
    if example.as_of:
        asked += f"  (as_of={example.as_of})"
    console.print(Text(asked, style="bold cyan"))
    console.print(Text(example.lesson, style="italic"))
    console.print(Panel(Text(result.context or "(nothing matched)"), title="context", title_align="left"))
    console.print(signal_table(result, example.spotlight))
    if now is not None and now.facts:
        console.print(Text(f"today the same question starts with: {now.facts[0].fact.text}"))
    console.print(spotlight_line(result, example.spotlight))
    ok = example.holds(result, now)
    console.print(_verdict(ok, example.claim))
    console.print()
    return ok


def _low_confidence_line(results: list[RecallResult]) -> tuple[bool, Text]:
    floor = 0.5
    low = [r for s in SAMPLES for r in s.records() if r.get("kind") != "episode" and r["confidence"] < floor]
    shown = [f for result in results for f in result.facts if f.fact.confidence < floor]
    example = min(low, key=lambda r: r["confidence"]) if low else None
    detail = (
        f" (e.g. '{example['subject']} {example['predicate']} {example['object']}', {example['confidence']})"
        if example
        else ""
    )
    claim = f"{len(low)} stored facts are below the {floor} confidence floor{detail}; none was recalled above"
    return not shown, _verdict(not shown, claim)


def run_demo(
    *,
    dsn: str | None = None,
    home: str | os.PathLike[str] | None = None,
    schema: str = "memsoda",
    embedder: Embedder | None = None,
    console: Console | None = None,
    reload: bool = False,
) -> bool:
    """Load the sample memory (idempotent) into the store at `dsn` (default: `MEMSODA_DSN`, else the
    embedded server under `home` / `MEMSODA_HOME`) and print the example recalls. Returns True
    when every claim held."""
    console = console or Console()
    with console.status("opening the store and the embedding model", spinner="dots"):
        memory = Memory.open(dsn, embedder, home=home, schema=schema)
    with memory:
        where = "your PostgreSQL" if dsn or os.environ.get("MEMSODA_DSN") else "the embedded PostgreSQL"
        signals = f"{_in_words(len(QUERY_SIGNALS))} recall signals"
        console.print(Text("memsoda demo", style="bold") + Text(f": {signals} over {where}"))
        console.print(
            Text(f"schema {schema!r}, embedder {memory.info.model} ({memory.info.dimensions} dimensions)", style="dim")
        )
        with console.status("loading the sample memory", spinner="dots"):
            loaded = load_samples(memory, reload=reload)
        for line in loaded:
            console.print(Text(line, style="dim"))
        console.print()
        options = replace(memory.options, facts_in_context=DEMO_K, episodes_k=1)
        outcomes: list[bool] = []
        results: list[RecallResult] = []
        for number, example in enumerate(EXAMPLES, start=1):
            dataset, project = example.sample.dataset, example.sample.project
            result = memory.recall(
                example.query,
                dataset=dataset,
                project=project,
                as_of=example.as_of,
                include=example.include,
                options=options,
            )
            now = None
            if example.as_of:
                now = memory.recall(example.query, dataset=dataset, project=project, options=options)
            results += [result] + ([now] if now else [])
            outcomes.append(_show(console, number, example, result, now))
        ok, floor_line = _low_confidence_line(results)
        outcomes.append(ok)
        console.print(floor_line)
        console.print()
        outcomes.append(show_learning(memory, console))
    held = all(outcomes)
    summary = "every claim above held" if held else f"{outcomes.count(False)} claim(s) did not hold"
    console.print(Text(summary, style="bold green" if held else "bold red"))
    console.print()
    console.print(Text("Try it yourself:", style="bold"))
    console.print(
        Text(
            f'  memsoda recall "anything good on Netflix tonight?" -d {MAYA.dataset} -p {MAYA.project} --explain\n'
            f"  memsoda stats\n  memsoda export maya.jsonl -d {MAYA.dataset} -p {MAYA.project}"
        ),
        highlight=False,
    )
    return held
