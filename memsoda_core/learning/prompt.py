"""The extraction prompt: a versioned text file in the package, rendered for one window."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from string import Template

from memsoda_core.errors import ConfigurationError
from memsoda_core.fact_text import validity
from memsoda_core.learning.messages import WindowMessage
from memsoda_core.models import Fact

PROMPT_VERSION = "extract-v1"
"""The packaged prompt (`memsoda_core/prompts/<version>.md`). A change of wording is a new
version, so stored results can say which prompt made them."""

SUMMARY_RULE = "- summary: one or two sentences on what this conversation was about.\n"


def load_prompt(prompt: str | os.PathLike[str] | None = None) -> str:
    """The prompt template: the packaged `PROMPT_VERSION`, or `prompt` (a template text holding
    `$messages`, or the path of a file with one). Placeholders: $user, $now, $facts, $messages,
    $summary_rule."""
    if prompt is None:
        return resources.files("memsoda_core").joinpath("prompts", f"{PROMPT_VERSION}.md").read_text("utf-8")
    if isinstance(prompt, str) and "$messages" in prompt:
        return prompt
    try:
        with open(prompt, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the extraction prompt {prompt!s}: {exc}") from None
    if "$messages" not in text:
        raise ConfigurationError(f"the extraction prompt {prompt!s} has no $messages placeholder")
    return text


@dataclass(frozen=True, kw_only=True)
class ExtractionRequest:
    """What an extractor is given: the window, the live facts related to it, the user entity's
    name, the window's time, and whether to summarise it."""

    messages: tuple[WindowMessage, ...]
    facts: tuple[Fact, ...]
    user: str
    now: datetime
    summarize: bool = False


def render_prompt(template: str, request: ExtractionRequest) -> str:
    """`template` filled in for `request` (unknown `$names` are left as they are)."""
    facts = "\n".join(f"[{fact.id}] {fact.text} ({validity(fact)})" for fact in request.facts)
    messages = "\n".join(
        f"[{m.timestamp.isoformat() if m.timestamp else 'no time'}] {m.role}: {m.content}" for m in request.messages
    )
    return Template(template).safe_substitute(
        user=request.user,
        now=request.now.isoformat(),
        facts=facts or "(none)",
        messages=messages,
        summary_rule=SUMMARY_RULE if request.summarize else "",
    )


def chat_messages(template: str, request: ExtractionRequest) -> Sequence[dict[str, str]]:
    """The prompt as chat messages: the whole of it as one user message (models without a system
    role read it the same)."""
    return [{"role": "user", "content": render_prompt(template, request)}]
