"""`profile`: the standing profile of a dataset/project (`Memory.profile`), as it goes into a system
prompt: the text alone, byte for byte, so it can be piped; `--json` adds its version and fact ids."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from memsoda_core.cli.common import DatasetOpt, JsonOpt, ProjectOpt, settings_of
from memsoda_core.cli.output import print_json, warn
from memsoda_core.cli.store import open_memory
from memsoda_core.recall.profile import DEFAULT_MAX_FACTS


def profile(
    ctx: typer.Context,
    dataset: DatasetOpt,
    project: ProjectOpt,
    max_facts: Annotated[int, typer.Option("--max-facts", "-n", help="Facts in the profile.")] = DEFAULT_MAX_FACTS,
    subject: Annotated[str, typer.Option("--subject", help="Whose facts.")] = "user",
    as_json: JsonOpt = False,
) -> None:
    """The standing profile for a system prompt: the subject's live facts, single-valued relations,
    then the most repeated, the most confident, the oldest first. The same bytes until one of them
    changes."""
    with open_memory(settings_of(ctx), embeds=False) as memory:
        found = memory.profile(dataset=dataset, project=project, subject=subject, max_facts=max_facts)
    if as_json:
        print_json({"text": found.text, "version": found.version, "fact_ids": list(found.fact_ids)})
        return
    if not found.text:
        warn(f"no live facts about {subject!r} in this dataset/project")
        return
    sys.stdout.write(found.text + "\n")
