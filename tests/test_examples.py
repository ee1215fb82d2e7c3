"""The examples run offline as scripts (each starts its own embedded server in a temporary
home) and print what memsoda recalled; the README's snippet and transcripts are what they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

EXPECTED = {
    "quickstart.py": [
        "- user favourite show is breaking bad  (valid: 2026-08-16 – present)",
        "second hop via 'breaking bad'",
    ],
    "langchain_lcel_chain.py": ["Q: What colour is my car?", "- honda civic has color blue", "Question: What colour"],
    "langchain_agent_tool.py": [
        "Tool Calls:",
        "recall_memory",
        "Tool Message",
        "- honda civic has color blue",
        "You drive a blue Honda Civic.",
    ],
    "langgraph_store.py": [
        "manage_memory",
        "created memory",
        "search_memory",
        '"value":{"content":"User is allergic to shellfish"}',
        "scope={'dataset': 'memories.alice', 'project': 'langgraph'}",
    ],
    "llamaindex_query_engine.py": [
        "memsoda-fact-",
        "user works at acme corp",
        "Context information is below.",
        "Query: Where does the user work?",
    ],
    "langchain_agent_memory.py": [
        "=== session 1",
        "save_memory",
        "Saved as fact(s)",
        "=== session 2",
        "] user is allergic to peanuts (valid",
    ],
    "llamaindex_learning_block.py": ["learned [", "user plays the violin", "=== session 2", "- user plays the violin"],
    "llamaindex_memory_block.py": [
        "=== session alice",
        "- alice drives honda civic",
        "=== session bob",
        "- bob drives tesla model 3",
    ],
}


def readme_blocks(heading: str) -> list[tuple[str, str]]:
    """The fenced blocks (info string, text) of the README's section `## heading`, in order."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"^```(\w*)\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def lines_of(text: str) -> list[str]:
    """The lines, without the trailing spaces rich pads wrapped lines with, and without trailing blank lines."""
    return [line.rstrip() for line in text.rstrip().split("\n")]


def run_offline(args: list[str], home: str, **env_overrides: str) -> subprocess.CompletedProcess[str]:
    """`python args...` as a new user runs it: the embedded server under `home`, the offline model."""
    env = {key: value for key, value in os.environ.items() if key not in ("MEMSODA_DSN", "OPENAI_API_KEY")}
    env.update({"MEMSODA_HOME": home, "HF_HUB_OFFLINE": "1", **env_overrides})
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=home, capture_output=True, text=True, timeout=300, check=False
    )


def recall_in_ten_lines() -> tuple[str, str]:
    """The README's snippet and the output it shows for it."""
    (code_kind, code), (out_kind, out) = readme_blocks("Recall in ten lines")[:2]
    assert (code_kind, out_kind) == ("python", "")
    return code, out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-example-test-") as home:
        done = run_offline([str(EXAMPLES / name)], home)
        assert done.returncode == 0, done.stderr
        for expected in EXPECTED[name]:
            assert expected in done.stdout, done.stdout
        assert "Traceback" not in done.stderr
        leftover = [p for p in Path(home).iterdir()]
        assert leftover == [], leftover  # the example cleaned up after itself
    if name == "quickstart.py":  # the README shows its whole output
        assert lines_of(done.stdout) == lines_of(recall_in_ten_lines()[1])
    if name == "llamaindex_memory_block.py":
        alice, bob = done.stdout.split("=== session bob")
        assert "tesla" not in alice and "honda" not in bob  # one block, two sessions, no leak


@pytest.mark.slow
def test_the_readme_snippet_prints_what_the_readme_shows() -> None:
    """Nothing is normalised: the facts' dates are their own and the scores are ranks' and the model's."""
    code, shown = recall_in_ten_lines()
    with tempfile.TemporaryDirectory(prefix="memsoda-readme-test-") as home:
        done = run_offline(["-c", code], home)
    assert done.returncode == 0, done.stderr
    assert lines_of(done.stdout) == lines_of(shown)


@pytest.mark.slow
def test_the_readme_demo_transcript_is_lines_of_a_real_demo_run() -> None:
    """The README's trimmed transcript: every line, in order, is a line of `memsoda demo` at 100
    columns (rich wraps at the terminal's width); the sample's dates are fixed, so nothing else varies."""
    (kind, transcript), *_ = readme_blocks("The demo and the command line")
    assert kind == ""
    wanted = lines_of(transcript)
    assert len(wanted) >= 20 and wanted[0].startswith("1. The anchor bridge")
    with tempfile.TemporaryDirectory(prefix="memsoda-readme-test-") as home:
        done = run_offline(["-m", "memsoda_core.cli", "demo"], home, COLUMNS="100", NO_COLOR="1")
    assert done.returncode == 0, done.stdout + done.stderr
    remaining = iter(lines_of(done.stdout))
    unmatched = [line for line in wanted if not any(line == ran for ran in remaining)]
    assert unmatched[:1] == [], f"first README line not in the run (in order): {unmatched[:1]}\n{done.stdout}"
