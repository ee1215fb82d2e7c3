"""The demo's learning part: `remember` on a short chat, with a real model only.

No model runs offline, so without `OPENAI_API_KEY` or `OPENAI_BASE_URL` the demo says how to turn
this on rather than print anything a model did not say.
"""

from __future__ import annotations

import os
import uuid

from rich.console import Console
from rich.text import Text

from memsoda_core.errors import MemsodaError
from memsoda_core.learning.extractors import OpenAIExtractor
from memsoda_core.memory import Memory

CHAT = [
    {"role": "user", "content": "I just moved from Amsterdam to Utrecht, and I started a new job at Philips."},
    {"role": "assistant", "content": "Congratulations! How is the commute?"},
    {"role": "user", "content": "Short: I cycle there in 15 minutes. My sister Ana still lives in Porto."},
]
QUESTION = "where do I work and how do I get there?"
MODEL_VARIABLE = "MEMSODA_EXTRACTOR_MODEL"


def show_learning(memory: Memory, console: Console) -> bool:
    """Learn from `CHAT` with the configured OpenAI-compatible model and recall from it; True when
    it ran (or was not configured), False when the model failed."""
    console.print(Text("Learning from a conversation (remember)", style="bold cyan"))
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        console.print(
            Text(
                "  skipped: it needs a chat model. Set OPENAI_API_KEY (or OPENAI_BASE_URL for a local "
                f"OpenAI-compatible server such as Ollama or vLLM, and {MODEL_VARIABLE} for its model name) "
                "and run the demo again.",
                style="dim",
            )
        )
        console.print()
        return True
    model = os.environ.get(MODEL_VARIABLE, "gpt-4o-mini")
    dataset, project = "demo-learning", uuid.uuid4().hex[:8]
    extractor = OpenAIExtractor(model, base_url=os.environ.get("OPENAI_BASE_URL"))
    try:
        result = memory.remember(CHAT, dataset=dataset, project=project, extractor=extractor, thread_id="demo")
        for fact_id in result.added:
            console.print(
                Text(f"  learned [{fact_id}] {memory.get_fact(fact_id, dataset=dataset, project=project).text}")
            )
        for rejected in result.rejected:
            console.print(
                Text(f"  rejected operation {rejected.index} ({rejected.op}): {rejected.reason}", style="dim")
            )
        console.print(Text(f"  recall: {QUESTION}", style="bold"))
        console.print(Text(memory.recall(QUESTION, dataset=dataset, project=project).context or "(nothing matched)"))
    except MemsodaError as exc:
        console.print(Text(f"  the model {model} failed: {exc}", style="bold red"))
        return False
    finally:
        extractor.close()
        memory.forget(dataset=dataset, project=project)
    console.print()
    return True
