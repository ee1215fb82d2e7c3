"""The `memsoda` command line, run for real (Typer's CliRunner, and a subprocess for the entry point)
against the test PostgreSQL: good paths, bad input, JSONL import/export, doctor, the demo and the
embedded server's start/status/stop."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from typer.testing import CliRunner, Result

from memsoda_core import ScopeArgs
from memsoda_core.cli import app, main

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}

NETFLIX = [
    {
        "subject": "breaking bad",
        "subject_type": "SHOW",
        "predicate": "streams on",
        "object": "netflix",
        "object_type": "SERVICE",
        "valid_at": "2024-01-01",
    },
    {
        "subject": "user",
        "subject_type": "PERSON",
        "predicate": "favourite show is",
        "object": "breaking bad",
        "object_type": "SHOW",
        "valid_at": "2026-08-16",
        "confidence": 0.9,
        "source_quote": "my favourite show is Breaking Bad",
    },
    {
        "subject": "user",
        "predicate": "drives",
        "object": "honda civic",
        "object_type": "PRODUCT",
        "valid_at": "2026-03-01",
    },
    {"kind": "episode", "thread_id": "t1", "text": "Talked about TV shows to watch.", "created_at": "2026-09-01"},
]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


class Cli(Protocol):
    """The `cli` fixture: `memsoda --dsn <test server>` with `args`, stdin from `input`."""

    def __call__(self, *args: str, input: str | None = None) -> Result: ...


@pytest.fixture
def cli(runner: CliRunner, pg_dsn: str) -> Cli:
    """Run `memsoda --dsn <test server> ARGS...`; returns the click Result."""

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, ["--dsn", pg_dsn, *args], input=input, env=ENV)

    return invoke


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def scope_args(scope: ScopeArgs) -> list[str]:
    return ["--dataset", scope["dataset"], "--project", scope["project"]]


def stats_of(cli: Cli, scope: ScopeArgs) -> list[dict[str, Any]]:
    result = cli("stats", "--json", *scope_args(scope))
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


@pytest.fixture
def netflix(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> ScopeArgs:
    """A scope holding the Netflix bridge facts and one episode, imported through the CLI."""
    result = cli("import", str(write_jsonl(tmp_path / "netflix.jsonl", NETFLIX)), *scope_args(scope))
    assert result.exit_code == 0, result.output
    assert "imported 3 facts and 1 episodes" in result.stdout
    return scope


def assert_user_error(result: Result, *needles: str) -> None:
    """One red line on stderr, exit status 1, no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


# --- recall -----------------------------------------------------------------------------------------


def test_recall_prints_the_context(cli: Cli, netflix: ScopeArgs) -> None:
    result = cli("recall", "anything good on Netflix tonight?", *scope_args(netflix))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Known facts about the user, most relevant first.")
    assert "- user favourite show is breaking bad  (valid: 2026-08-16 – present)" in result.stdout
    assert result.stdout.index("favourite show is breaking bad") < result.stdout.index("drives honda civic")


def test_recall_json_parses(cli: Cli, netflix: ScopeArgs) -> None:
    result = cli("recall", "anything good on Netflix tonight?", *scope_args(netflix), "--json", "--include", "episodes")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    texts = [fact["text"] for fact in data["facts"]]
    assert "user favourite show is breaking bad" in texts
    bridged = data["facts"][texts.index("user favourite show is breaking bad")]
    assert bridged["ranks"]["anchor"] >= 1 and "keyword" not in bridged["ranks"]
    assert bridged["source_quote"] == "my favourite show is Breaking Bad"
    assert data["degraded"] is False
    assert [e["text"] for e in data["episodes"]] == ["Talked about TV shows to watch."]
    assert "# EPISODES" in data["context"]


def test_recall_explain_shows_ranks_per_signal(cli: Cli, netflix: ScopeArgs) -> None:
    result = cli("recall", "what streams on Netflix tonight?", *scope_args(netflix), "--explain", "-k", "2")
    assert result.exit_code == 0, result.output
    table = result.stdout.split("# ENTITIES", 1)[1]
    header = next(line for line in table.splitlines() if "fact" in line and "score" in line)
    for column in ("vector", "anchor", "keyword", "why"):
        assert column in header
    assert "second hop via 'breaking bad'" in table
    assert "touches 'netflix', named in the query" in table
    assert "matched terms: streams, netflix" in table
    assert "honda civic" not in result.stdout  # k=2
    assert "fusion: the general options for recent.candidates, keyword.min_terms, anchor.name_share" in table


def test_recall_raw_shows_confidence_and_quote(cli: Cli, netflix: ScopeArgs) -> None:
    result = cli("recall", "favourite show", *scope_args(netflix), "--include", "raw")
    assert result.exit_code == 0, result.output
    assert "my favourite show is Breaking Bad" in result.stdout
    assert "0.9" in result.stdout and "source quote" in result.stdout


def test_recall_without_query_gives_recent_facts(cli: Cli, netflix: ScopeArgs) -> None:
    result = cli("recall", *scope_args(netflix), "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)["facts"]
    assert facts[0]["text"] == "user favourite show is breaking bad"  # the latest valid_at
    assert all(set(f["ranks"]) == {"recent"} for f in facts)


def test_recall_of_an_empty_scope_says_so(cli: Cli, scope: ScopeArgs) -> None:
    result = cli("recall", "anything?", *scope_args(scope))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert f"{scope['dataset']}/{scope['project']} holds no facts" in result.stderr


def test_recall_as_of(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> None:
    lines = [
        {
            "subject": "user",
            "predicate": "lives in",
            "object": "lisbon",
            "valid_at": "2019-01-01",
            "invalid_at": "2025-04-01",
        },
        {"subject": "user", "predicate": "lives in", "object": "berlin", "valid_at": "2025-04-01"},
    ]
    assert cli("import", str(write_jsonl(tmp_path / "moves.jsonl", lines)), *scope_args(scope)).exit_code == 0
    then = cli("recall", "where do I live?", *scope_args(scope), "--as-of", "2024-06-01")
    now = cli("recall", "where do I live?", *scope_args(scope))
    assert "user lives in lisbon" in then.stdout and "berlin" not in then.stdout
    assert "user lives in berlin" in now.stdout and "lisbon" not in now.stdout


# --- bad input --------------------------------------------------------------------------------------


def test_bad_date_is_one_red_line(cli: Cli, scope: ScopeArgs) -> None:
    result = cli("recall", "x", *scope_args(scope), "--as-of", "yesterday")
    assert_user_error(result, "as_of='yesterday'", "ISO-8601")


def test_verbose_shows_the_traceback(runner: CliRunner, pg_dsn: str, scope: ScopeArgs) -> None:
    result = runner.invoke(
        app, ["--dsn", pg_dsn, "--verbose", "recall", "x", *scope_args(scope), "--as-of", "soon"], env=ENV
    )
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "DateError" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: ")


def test_missing_dataset_is_a_usage_error(cli: Cli) -> None:
    result = cli("recall", "x", "--project", "p")
    assert result.exit_code == 2
    assert "Missing option" in result.output and "--dataset" in result.output
    assert "Traceback" not in result.output


def test_blank_dataset_is_rejected(cli: Cli) -> None:
    result = cli("recall", "x", "--dataset", " ", "--project", "p")
    assert result.exit_code == 2
    assert "must not be empty" in result.output


def test_bad_k_and_include(cli: Cli, scope: ScopeArgs) -> None:
    assert_user_error(cli("recall", "x", *scope_args(scope), "-k", "0"), "facts_in_context (k)")
    assert_user_error(cli("recall", "x", *scope_args(scope), "--include", "raw,gossip"), "gossip")
    assert cli("recall", "x", *scope_args(scope), "--include", "synthesis").exit_code == 2


def test_add_stores_one_fact(cli: Cli, scope: ScopeArgs) -> None:
    result = cli(
        "add", *scope_args(scope), "-s", "User", "-P", "drives", "-o", "Honda  Civic", "--object-type", "product",
        "--valid-at", "2026-03-01", "--confidence", "0.8", "--quote", "I drive a Honda Civic",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("added fact ")
    literal = cli("add", *scope_args(scope), "-s", "user", "-P", "phone number is", "-o", "+49 30 1234", "--literal")
    assert literal.exit_code == 0, literal.output
    facts = json.loads(cli("recall", "honda", *scope_args(scope), "--json").stdout)["facts"]
    civic = next(f for f in facts if f["predicate"] == "drives")
    assert (civic["subject"], civic["object"], civic["object_type"]) == ("user", "honda civic", "PRODUCT")
    assert civic["valid_at"].startswith("2026-03-01") and civic["confidence"] == pytest.approx(0.8)
    assert stats_of(cli, scope)[0]["facts"] == 2


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--valid-at", "2026-13-45"], "valid_at='2026-13-45'"),
        (["--confidence", "2"], "confidence"),
        (["--valid-at", "2026-05-01", "--invalid-at", "2026-01-01"], "invalid_at"),
        (["--subject", "   "], "subject"),
    ],
)
def test_add_bad_input_writes_nothing(cli: Cli, scope: ScopeArgs, options: list[str], needle: str) -> None:
    base = {"--subject": "user", "--predicate": "likes", "--object": "tea"}
    for flag in options[::2]:
        base.pop(flag, None)
    args = [part for pair in base.items() for part in pair]
    assert_user_error(cli("add", *scope_args(scope), *args, *options), needle)
    assert stats_of(cli, scope) == []


# --- import / export --------------------------------------------------------------------------------

BAD_FILE = [
    {"subject": "user", "predicate": "likes", "object": "tea"},
    '{"subject": "user", "predicate": "likes"',
    {"subject": "user", "predicate": "drinks", "object": "coffee", "confidence": 1.5},
    {"kind": "episode", "text": "We talked about tea."},
    {"subject": "user", "predicate": "reads", "object": "dune", "valid_at": "someday"},
    {"subject": "user", "predicate": "visited", "object": "porto"},
]


def test_import_raise_rejects_the_file_and_writes_nothing(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", BAD_FILE)
    result = cli("import", str(path), *scope_args(scope), "--on-error", "raise")
    assert_user_error(result, "line 2:", "not valid JSON", "nothing was imported")
    assert stats_of(cli, scope) == []


def test_import_skip_reports_line_numbers(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", BAD_FILE)
    result = cli("import", str(path), *scope_args(scope), "--on-error", "skip")
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped ")]
    assert [line.split(":")[0] for line in skipped] == ["skipped line 2", "skipped line 3", "skipped line 5"]
    assert "confidence" in skipped[1] and "valid_at" in skipped[2]
    assert "imported 2 facts and 1 episodes" in result.stdout and "skipped 3 bad lines" in result.stdout
    (row,) = stats_of(cli, scope)
    assert (row["facts"], row["episodes"]) == (2, 1)


def test_import_rejects_unknown_on_error_and_missing_file(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ok.jsonl", BAD_FILE[:1])
    assert cli("import", str(path), *scope_args(scope), "--on-error", "ignore").exit_code == 2
    missing = cli("import", str(tmp_path / "nope.jsonl"), *scope_args(scope))
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_import_rejects_non_utf8(cli: Cli, scope: ScopeArgs, tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes('{"subject": "café", "predicate": "is", "object": "open"}\n'.encode("latin-1"))
    assert_user_error(cli("import", str(path), *scope_args(scope)), "not UTF-8")
    assert stats_of(cli, scope) == []


def test_export_import_round_trip(cli: Cli, netflix: ScopeArgs, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    result = cli("export", str(out), *scope_args(netflix))
    assert result.exit_code == 0, result.output
    assert "exported 4 lines" in result.stdout
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["kind"] for r in records] == ["fact", "fact", "fact", "episode"]
    assert not list(tmp_path.glob(".*.part"))

    copy: ScopeArgs = {"dataset": netflix["dataset"] + "-copy", "project": netflix["project"]}
    assert cli("import", str(out), *scope_args(copy)).exit_code == 0
    again = tmp_path / "again.jsonl"
    assert cli("export", str(again), *scope_args(copy)).exit_code == 0
    strip = [{k: v for k, v in json.loads(line).items() if k != "id"} for line in again.read_text().splitlines()]
    assert strip == [{k: v for k, v in r.items() if k != "id"} for r in records]

    stdout = cli("export", "-", *scope_args(netflix))
    assert stdout.exit_code == 0
    assert [json.loads(line)["kind"] for line in stdout.stdout.splitlines()] == ["fact", "fact", "fact", "episode"]


def test_export_to_a_missing_directory(cli: Cli, netflix: ScopeArgs, tmp_path: Path) -> None:
    result = cli("export", str(tmp_path / "no" / "such" / "dir.jsonl"), *scope_args(netflix))
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "no").exists()


def test_forget(cli: Cli, netflix: ScopeArgs) -> None:
    assert cli("forget", *scope_args(netflix), input="n\n").exit_code == 1  # declined: aborted
    assert stats_of(cli, netflix)[0]["facts"] == 3
    entity = cli("forget", *scope_args(netflix), "--entity", "Honda Civic", "--yes")
    assert entity.exit_code == 0 and "deleted 1 facts" in entity.stdout
    everything = cli("forget", *scope_args(netflix), input="y\n")
    assert everything.exit_code == 0 and "deleted 2 facts" in everything.stdout
    assert stats_of(cli, netflix) == []


# --- stats and doctor -------------------------------------------------------------------------------


def test_stats(cli: Cli, netflix: ScopeArgs) -> None:
    (row,) = stats_of(cli, netflix)
    assert row == {**netflix, "facts": 3, "live_facts": 3, "entities": 4, "episodes": 1}
    table = cli("stats", "--dataset", netflix["dataset"])
    assert table.exit_code == 0
    header, _, data = table.stdout.splitlines()[:3]
    assert "live facts" in header and netflix["dataset"] in data


def test_doctor_passes_on_the_test_server(cli: Cli) -> None:
    result = cli("doctor")
    assert result.exit_code == 0, result.output
    for name in ("postgres", "pgvector", "schema", "embedder", "embedder vs store"):
        assert name in result.stdout
    assert "all-MiniLM-L6-v2, 384 dimensions" in result.stdout
    assert "memsoda is ready" in result.stdout
    checks = json.loads(cli("doctor", "--json").stdout)
    assert {c["name"]: c["status"] for c in checks}["pgvector"] == "ok"


def test_doctor_explains_an_unreachable_server(runner: CliRunner) -> None:
    dsn = "postgresql://memsoda:secret@127.0.0.1:1/nothing"
    result = runner.invoke(app, ["--dsn", dsn, "doctor"], env=ENV)
    assert result.exit_code == 1
    assert "cannot connect" in result.stdout and "→ check that the server is running" in result.stdout
    assert "secret" not in result.stdout and "***" in result.stdout
    assert "some checks failed" in result.stdout


def test_doctor_reports_a_schema_not_created_yet(cli: Cli) -> None:
    result = cli("--schema", "never_created", "doctor")
    assert result.exit_code == 0, result.output
    assert "has not been created yet" in result.stdout


def test_unreachable_store_is_a_user_error(runner: CliRunner, scope: ScopeArgs) -> None:
    result = runner.invoke(app, ["--dsn", "postgresql://x@127.0.0.1:1/y", "stats"], env=ENV)
    assert_user_error(result, "PostgreSQL is unavailable")


def test_a_dsn_that_is_not_a_connection_string_is_a_user_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--dsn", "http://localhost:5432", "stats"], env=ENV)
    assert_user_error(result, "dsn is not a PostgreSQL connection string", "postgresql://")


# --- the demo ---------------------------------------------------------------------------------------


def test_demo_shows_the_netflix_bridge_and_is_idempotent(runner: CliRunner, pg_dsn: str) -> None:
    first = runner.invoke(app, ["--dsn", pg_dsn, "demo", "--reload"], env=ENV)
    assert first.exit_code == 0, first.output
    out = first.stdout
    assert "loaded Maya's memory into demo-maya/assistant: 86 facts, 3 episodes" in out
    assert "- user favourite show is breaking bad  (valid: 2023-05-14 – present)" in out
    assert "second hop via 'breaking bad'" in out
    assert "✗" not in out and "every claim above held" in out
    assert out.count("✓") == 6
    second = runner.invoke(app, ["--dsn", pg_dsn, "demo"], env=ENV)
    assert second.exit_code == 0, second.output
    assert "Maya's memory is already in demo-maya/assistant: 86 facts, 3 episodes" in second.stdout
    assert "Sam's memory is already in demo-sam/assistant" in second.stdout
    maya: ScopeArgs = {"dataset": "demo-maya", "project": "assistant"}
    assert runner.invoke(app, ["--dsn", pg_dsn, "stats", "--json", *scope_args(maya)]).exit_code == 0
    (row,) = json.loads(runner.invoke(app, ["--dsn", pg_dsn, "stats", "--json", *scope_args(maya)]).stdout)
    assert (row["facts"], row["episodes"]) == (86, 3)


# --- the entry point and the embedded server ----------------------------------------------------------


def test_main_returns_exit_codes(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "recall" in capsys.readouterr().out
    assert main(["--dsn", pg_dsn, "recall", "x"]) == 2  # missing --dataset
    assert main(["--dsn", pg_dsn, "forget", "-d", "nope", "-p", "nope", "--yes"]) == 0


def run_memsoda(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed entry point in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from memsoda_core.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def test_subprocess_json_and_user_error(pg_dsn: str, netflix: ScopeArgs) -> None:
    ok = run_memsoda("--dsn", pg_dsn, "stats", "--json", *scope_args(netflix))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["facts"] == 3
    bad = run_memsoda("--dsn", pg_dsn, "export", "-", "--dataset", netflix["dataset"], "--project", "x" * 300)
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr and "XDG_RUNTIME_DIR" not in bad.stderr
    assert bad.stderr.strip().startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh MEMSODA_HOME; whatever server it holds is stopped at the end."""
    path = Path(tempfile.mkdtemp(prefix="memsoda-cli-"))
    try:
        yield path
    finally:
        CliRunner().invoke(app, ["--home", str(path), "server", "stop"], env={"MEMSODA_DSN": None})
        shutil.rmtree(path, ignore_errors=True)


def test_home_on_the_command_line_beats_memsoda_dsn(runner: CliRunner, home: Path, pg_dsn: str) -> None:
    unusable = "localhost:5432"  # not a connection string: a command that took it would fail
    stats = runner.invoke(app, ["--home", str(home), "stats", "--json"], env={**ENV, "MEMSODA_DSN": unusable})
    assert stats.exit_code == 0, stats.output
    assert (home / "pg").is_dir()  # the embedded server under --home served it
    both = runner.invoke(
        app, ["--dsn", pg_dsn, "--home", str(home), "stats", "--json"], env={**ENV, "MEMSODA_DSN": None}
    )
    assert both.exit_code == 0, both.output  # the store at --dsn; --home names where a served model runs
    from_env = runner.invoke(app, ["--dsn", pg_dsn, "stats", "--json"], env={**ENV, "MEMSODA_HOME": str(home)})
    assert from_env.exit_code == 0, from_env.output  # --dsn beats MEMSODA_HOME


def test_server_start_status_stop(runner: CliRunner, home: Path, scope: ScopeArgs) -> None:
    def server(*args: str) -> Result:
        return runner.invoke(app, ["--home", str(home), *args], env={**ENV, "MEMSODA_DSN": None})

    before = json.loads(server("server", "status", "--json").stdout)
    assert before["running"] is False and before["pgdata"] == str(home.resolve() / "pg")

    started = server("server", "start")
    assert started.exit_code == 0, started.output
    assert "running" in started.stdout and "yes" in started.stdout
    status = json.loads(server("server", "status", "--json").stdout)
    assert status["running"] is True and status["kept_by"] and status["uri"].startswith("postgresql://")
    assert "already running" in server("server", "start").stderr

    # Commands use the kept server and leave it running when they finish.
    added = server("add", *scope_args(scope), "-s", "user", "-P", "likes", "-o", "tea")
    assert added.exit_code == 0, added.output
    assert json.loads(server("server", "status", "--json").stdout)["running"] is True
    assert json.loads(server("stats", "--json", *scope_args(scope)).stdout)[0]["facts"] == 1

    stopped = server("server", "stop")
    assert stopped.exit_code == 0 and "stopped" in stopped.stdout
    after = json.loads(server("server", "status", "--json").stdout)
    assert after["running"] is False and after["kept_by"] is None
