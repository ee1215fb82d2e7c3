"""`memsoda profile` run for real (Typer's CliRunner) against the test PostgreSQL: the profile's text
byte for byte as `Memory.profile` gives it, the same after an unrelated write, JSON, bad input."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from memsoda_core import Memory, ScopeArgs
from memsoda_core.cli import app

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def test_profile_command(pg_dsn: str, sync_memory: Memory, scope: ScopeArgs) -> None:
    runner = CliRunner()
    args = ["--dsn", pg_dsn, "profile", "--dataset", scope["dataset"], "--project", scope["project"], "-n", "2"]
    empty = runner.invoke(app, args, env=ENV)
    assert empty.exit_code == 0 and empty.stdout == ""
    assert "no live facts about 'user'" in empty.stderr
    sync_memory.add_facts(
        [
            {"subject": "user", "predicate": "lives in", "object": "lisbon", "valid_at": "2024-01-01"},
            {"subject": "user", "predicate": "drinks", "object": "green tea"},
            {"subject": "user", "predicate": "plays", "object": "chess"},
        ],
        **scope,
    )
    expected = sync_memory.profile(**scope, max_facts=2)
    shown = runner.invoke(app, args, env=ENV)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == expected.text + "\n"
    sync_memory.add_facts([{"subject": "ana", "predicate": "plays", "object": "go"}], **scope)
    assert runner.invoke(app, args, env=ENV).stdout == shown.stdout
    data = json.loads(runner.invoke(app, [*args, "--json"], env=ENV).stdout)
    assert data == {"text": expected.text, "version": expected.version, "fact_ids": list(expected.fact_ids)}
    bad = runner.invoke(app, [*args[:-1], "0"], env=ENV)
    assert bad.exit_code == 1 and "max_facts must be an int between 1 and" in bad.stderr
