"""The examples run offline as scripts (each starts its own embedded server in a temporary
home) and print what memsoda recalled."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

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


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-example-test-") as home:
        env = {key: value for key, value in os.environ.items() if key not in ("MEMSODA_DSN", "OPENAI_API_KEY")}
        env.update({"MEMSODA_HOME": home, "HF_HUB_OFFLINE": "1"})
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / name)],
            env=env,
            cwd=home,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        for expected in EXPECTED[name]:
            assert expected in done.stdout, done.stdout
        assert "Traceback" not in done.stderr
        leftover = [p for p in Path(home).iterdir()]
        assert leftover == [], leftover  # the example cleaned up after itself
    if name == "llamaindex_memory_block.py":
        alice, bob = done.stdout.split("=== session bob")
        assert "tesla" not in alice and "honda" not in bob  # one block, two sessions, no leak
