"""A recall of a dataset/project that holds no facts says so (`RecallResult.scope_empty`), through
the public API (sync and async), the adapters' metadata and the CLI; a scope whose facts exist but
do not match is not empty."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from memsoda_core import Memory, ScopeArgs
from memsoda_core.adapting import context_metadata
from memsoda_core.cli import app
from memsoda_langchain import MemsodaRetriever
from tests.conftest import Either
from tests.helpers import ADAPTER_FACTS, ADAPTER_QUERY

LOW = {"subject": "user", "predicate": "likes", "object": "tea", "confidence": 0.3}  # stored, never recalled


def misspelt(scope: ScopeArgs) -> ScopeArgs:
    return {**scope, "dataset": scope["dataset"] + "x"}


async def test_a_scope_without_facts_says_so(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(ADAPTER_FACTS, **scope)
    held = await memory.recall(ADAPTER_QUERY, **scope)
    assert held.context and held.scope_empty is False
    for query in (ADAPTER_QUERY, None):  # with and without a query (recent facts)
        typo = await memory.recall(query, **misspelt(scope))
        assert (typo.context, typo.facts, typo.scope_empty) == ("", (), True)
        assert typo.to_dict()["scope_empty"] is True
    other_project = await memory.recall(ADAPTER_QUERY, dataset=scope["dataset"], project="projx")
    assert other_project.scope_empty is True


async def test_facts_that_do_not_match_are_not_an_empty_scope(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts([LOW], **scope)
    result = await memory.recall("what does the user like?", **scope)
    assert (result.context, result.scope_empty) == ("", False)
    await memory.add_facts([{**LOW, "object": "coffee", "confidence": 1.0, "valid_at": "2026-01-01"}], **scope)
    before = await memory.recall("what does the user like?", **scope, as_of="2020-01-01")
    assert (before.context, before.scope_empty) == ("", False)


async def test_a_forgotten_scope_is_empty(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(ADAPTER_FACTS, **scope)
    assert (await memory.recall(ADAPTER_QUERY, **scope)).scope_empty is False  # its size is remembered now
    await memory.forget(**scope)
    assert (await memory.recall(ADAPTER_QUERY, **scope)).scope_empty is True


async def test_facts_written_elsewhere_are_seen(memory: Either, sync_memory: Memory, scope: ScopeArgs) -> None:
    """A size remembered as 0 by this memory is out of date once another one writes: what recall
    finds decides, the scope is not reported empty."""
    assert (await memory.recall(ADAPTER_QUERY, **scope)).scope_empty is True
    sync_memory.add_facts(ADAPTER_FACTS, **scope)
    result = await memory.recall(ADAPTER_QUERY, **scope)
    assert "user drives honda civic" in result.context and result.scope_empty is False


async def test_adapters_metadata_carries_it(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(ADAPTER_FACTS, **scope)
    retriever = MemsodaRetriever(memory=memory.raw, **scope)
    (doc,) = await retriever.ainvoke(ADAPTER_QUERY)
    assert doc.metadata["scope_empty"] is False
    empty = await memory.recall(ADAPTER_QUERY, **misspelt(scope))
    assert context_metadata(empty, episodes=False)["scope_empty"] is True


def test_cli_says_the_scope_holds_no_facts(pg_dsn: str, scope: ScopeArgs) -> None:
    runner = CliRunner()

    def cli(*args: str) -> Any:
        result = runner.invoke(app, ["--dsn", pg_dsn, *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 0, result.output
        return result

    where = ["--dataset", scope["dataset"], "--project", scope["project"]]
    empty = cli("recall", "anything?", *where)
    assert empty.stdout == ""
    assert f"{scope['dataset']}/{scope['project']} holds no facts" in empty.stderr
    assert "nothing matched" not in empty.stderr
    assert json.loads(cli("recall", "anything?", *where, "--json").stdout)["scope_empty"] is True
    cli("add", "-s", "user", "-P", "likes", "-o", "tea", "--confidence", "0.3", *where)
    unmatched = cli("recall", "anything?", *where)
    assert unmatched.stdout == "" and "nothing matched" in unmatched.stderr
    assert "holds no facts" not in unmatched.stderr
    assert json.loads(cli("recall", "anything?", *where, "--json").stdout)["scope_empty"] is False
