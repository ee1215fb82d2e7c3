"""Where the store is: a DSN, or the embedded server this process started."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from memsoda_core.errors import (
    ConfigurationError,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where the store is: a DSN, and the embedded server's data dir when we started one."""

    dsn: str
    pgdata: Path | None


def resolve_target(dsn: str | None, home: str | os.PathLike[str] | None) -> Target:
    """`dsn`, else the embedded server under `home`, else `MEMSODA_DSN`, else the embedded server
    under `MEMSODA_HOME` (or the user data directory): what the caller names beats the environment.
    Both `dsn` and `home` name two stores: a ConfigurationError."""
    if dsn and home is not None:
        raise ConfigurationError("give dsn= (a server of your own) or home= (the embedded server), not both")
    if dsn:
        return Target(dsn=check_dsn(dsn, "dsn"), pgdata=None)
    configured = os.environ.get("MEMSODA_DSN")
    if configured and home is None:
        return Target(dsn=check_dsn(configured, "MEMSODA_DSN"), pgdata=None)
    from memsoda_core import server

    pgdata, uri = server.acquire(Path(home) if home is not None else None)
    return Target(dsn=uri, pgdata=pgdata)


def check_dsn(dsn: object, source: str) -> str:
    """`dsn` when libpq reads it as a connection string (a postgresql:// or postgres:// URI, or
    key=value pairs); else ConfigurationError, before any connection is tried."""
    usage = "use a postgresql:// or postgres:// URI, or libpq key=value pairs such as 'host=localhost dbname=memsoda'"
    if not isinstance(dsn, str):
        raise ConfigurationError(f"{source} must be a string, not {type(dsn).__name__}: {usage}")
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = str(exc).strip()
        raise ConfigurationError(f"{source} is not a PostgreSQL connection string ({reason}): {usage}") from None
    return dsn


def release_target(target: Target) -> None:
    if target.pgdata is not None:
        from memsoda_core import server

        server.release(target.pgdata)


def check_schema_name(schema: str) -> str:
    """Any PostgreSQL name (it is always quoted), except one with `%`, which psycopg would read as
    a placeholder in every statement that names the schema, or NUL."""
    if not isinstance(schema, str) or not schema or len(schema) > 63:
        raise ConfigurationError("schema must be a non-empty name of at most 63 characters")
    if "%" in schema or "\x00" in schema:
        raise ConfigurationError("schema names cannot contain '%' or NUL characters")
    return schema
