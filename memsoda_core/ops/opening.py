"""Opening a store: create or upgrade the schema, check the embedder, record settings; an
up-to-date store is only read, so a read-only session (a replica, a read-only role) can open it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from psycopg import sql

from memsoda_core import limits
from memsoda_core.distributed import citus_version_statement, facts_distributed_statement
from memsoda_core.embedders.choice import EXPLICIT, Origin, RecordedSpace, check_space
from memsoda_core.errors import (
    ConfigurationError,
    ReadOnlyStoreError,
    SchemaError,
)
from memsoda_core.layouts import new_store_layout
from memsoda_core.ops.maintenance import ensure_all_tenant_indexes
from memsoda_core.runner.steps import Operation, execute, execute_as
from memsoda_core.store import layout as sql_layout
from memsoda_core.store import schema as ddl
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo

TENANT_INDEX_KEY = "tenant_index_min_facts"
"""Meta key of the store's threshold for tenant indexes (set by the last open that gave one)."""


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """What an open reads before deciding whether it writes anything (`ddl.session_state_statement`)."""

    read_only: bool
    vector: bool
    meta: bool


def check_index_dimensions(model: str, dimensions: int) -> None:
    """A vector space the store's HNSW indexes can hold (pgvector: `limits.MAX_DIMENSIONS`), else
    ConfigurationError: for a new store and for the target of a re-embed."""
    if not 1 <= dimensions <= limits.MAX_DIMENSIONS:
        raise ConfigurationError(
            f"the embedder {model!r} gives {dimensions} dimensions, and pgvector's HNSW index holds at most "
            f"{limits.MAX_DIMENSIONS}: ask it for fewer (OpenAI's text-embedding-3 models take dimensions=, "
            "e.g. OpenAIEmbedder(..., dimensions=1536)) or use another model"
        )


def read_session_state(schema: str) -> Operation[SessionState]:
    """The session's read-only flag, pgvector's presence and the store's meta table: reads only."""
    rows = yield from execute_as(SessionState, ddl.session_state_statement(), {"schema": schema})
    return rows[0]


def read_meta(schema: str) -> Operation[dict[str, str]]:
    rows = yield from execute(ddl.read_meta_statement(schema))
    return {str(key): str(value) for key, value in rows}


def needed_writes(
    state: SessionState, meta: Mapping[str, str], tenant_index_min_facts: int | None, layout: str | None
) -> list[str]:
    """What opening this store would write, named for an error: nothing for an up-to-date store
    opened with its recorded settings, so such an open sends no DDL and takes no lock."""
    writes: list[str] = []
    if not state.vector:
        writes.append("install pgvector")
    current = int(meta.get("schema_version", 0))
    if not state.meta or current == 0:
        writes.append("create the store")
    elif current < ddl.SCHEMA_VERSION:
        writes.append(f"upgrade the schema from version {current} to {ddl.SCHEMA_VERSION}")
    elif sql_layout.LAYOUT_KEY not in meta:
        writes.append(f"record the {layout or 'default'} layout")
    if tenant_index_min_facts is not None and meta.get(TENANT_INDEX_KEY) != str(tenant_index_min_facts):
        writes.append(f"record tenant_index_min_facts={tenant_index_min_facts}")
    return writes


def refuse_read_only_open(schema: str, writes: Sequence[str], asked: bool) -> None:
    """A read-only open of a store that would need writing first."""
    why = "read_only=True" if asked else "the session is read-only (a hot standby, a replica, a read-only role)"
    raise ReadOnlyStoreError(
        f"schema {schema!r} cannot be opened read-only ({why}): opening it would {', '.join(writes)}; "
        "open it once read-write on the primary (without tenant_index_min_facts, or with the recorded one)"
    )


def recorded_space(schema: str) -> Operation[RecordedSpace | None]:
    """The model and dimension the store in `schema` records, or None before it is created."""
    ((exists,),) = yield from execute(ddl.meta_exists_statement(), {"schema": schema})
    if not exists:
        return None
    meta = yield from read_meta(schema)
    if "model" not in meta or "dimensions" not in meta:
        return None
    return RecordedSpace(model=meta["model"], dimensions=int(meta["dimensions"]))


def _layout_fields(schema: str, meta: Mapping[str, str], *, citus: bool) -> Operation[dict[str, Any]]:
    """The `StoreInfo` fields of the store's layout, from its meta and (under Citus) its catalog."""
    distributed = False
    if citus:
        ((distributed,),) = yield from execute(facts_distributed_statement(), {"schema": schema})
    return {
        "tenant_index_min_facts": int(meta.get(TENANT_INDEX_KEY, sql_tenant_index.DEFAULT_MIN_FACTS)),
        "layout": "citus" if distributed else meta[sql_layout.LAYOUT_KEY],
        "layout_generation": int(meta.get(ddl.LAYOUT_GENERATION_KEY, 0)),
    }


def reload_layout(info: StoreInfo) -> Operation[StoreInfo]:
    """`info` with the store's layout as it is now (another process may have changed it since the
    open: `layouts.generation`); reads only."""
    meta = yield from read_meta(info.schema)
    citus = bool((yield from execute(citus_version_statement())))
    return replace(info, **(yield from _layout_fields(info.schema, meta, citus=citus)))


DEFAULT_TEXT_SEARCH_CONFIG = "english"
"""A new store's text search configuration unless `open` names one."""


def text_search_config_statement() -> sql.SQL:
    """A row when %(name)s names a text search configuration the server has (visible on the search
    path, or schema-qualified)."""
    return sql.SQL(
        """SELECT 1 FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace
           WHERE (c.cfgname = %(name)s AND pg_ts_config_is_visible(c.oid))
              OR n.nspname || '.' || c.cfgname = %(name)s"""
    )


def open_store(
    *,
    schema: str,
    model: str,
    dimensions: int,
    text_search_config: str | None,
    tenant_index_min_facts: int | None,
    layout: str | None = None,
    read_only: bool = False,
    origin: Origin = EXPLICIT,
) -> Operation[StoreInfo]:
    """Create or upgrade the schema (under an advisory lock), check the embedder matches, record
    `tenant_index_min_facts` if given (else use the recorded one, or the default), then build any
    tenant indexes a large scope lacks (after an upgrade, or an interrupted build). The layout
    (`layouts.OPENED_WITH`) is chosen once, when the store is created or upgraded to it: `layout`,
    else plain where Citus is installed and partitioned elsewhere (`layouts.new_store_layout`).

    An up-to-date store opened with its recorded settings is only read (no lock, no DDL, no meta
    write). `read_only`, or a read-only session, opens it for reads (`StoreInfo.read_only`), and
    raises `ReadOnlyStoreError` if the store would need writing first. `origin` (why this embedder)
    words the advice of an `EmbedderMismatchError`."""
    state = yield from read_session_state(schema)
    read_only = read_only or state.read_only
    meta = (yield from read_meta(schema)) if state.meta else {}
    if "dimensions" not in meta:
        check_index_dimensions(model, dimensions)
    writes = needed_writes(state, meta, tenant_index_min_facts, layout)
    if writes and read_only:
        refuse_read_only_open(schema, writes, asked=not state.read_only)
    if writes:
        statement, params = ddl.lock_statement(schema)
        yield from execute(statement, params)
        for bootstrap in ddl.bootstrap_statements(schema):
            yield from execute(bootstrap)
        meta = yield from read_meta(schema)
    stored_meta = dict(meta)  # as read: only what differs is written back
    current = int(meta.get("schema_version", 0))
    if current > ddl.SCHEMA_VERSION:
        raise SchemaError(
            f"schema {schema!r} is at version {current}, newer than this memsoda supports "
            f"({ddl.SCHEMA_VERSION}); upgrade memsoda"
        )
    recorded_config = meta.get("text_search_config") if current else None
    if recorded_config is not None and text_search_config not in (None, recorded_config):
        raise ConfigurationError(
            f"schema {schema!r} searches text with the {recorded_config!r} configuration, fixed when it was "
            f"created (its keyword columns are built with it): open it with text_search_config=None"
        )
    if current == 0:
        chosen_config = text_search_config or DEFAULT_TEXT_SEARCH_CONFIG
        if not (yield from execute(text_search_config_statement(), {"name": chosen_config})):
            raise ConfigurationError(
                f"text_search_config {chosen_config!r} is not a text search configuration of this server"
                " (its pg_ts_config lists them: english, simple, german, ...)"
            )
        meta = {
            "model": model,
            "dimensions": str(dimensions),
            "text_search_config": chosen_config,
        }
    stored_model, stored_dims = meta["model"], int(meta["dimensions"])
    check_space(RecordedSpace(model=stored_model, dimensions=stored_dims), model, dimensions, origin)
    shape = ddl.StoreShape(schema=schema, dimensions=stored_dims, text_search_config=meta["text_search_config"])
    pending = ddl.pending_migrations(current)
    for version, migration in pending:
        for statement_ in migration(shape):
            yield from execute(statement_)
        meta["schema_version"] = str(version)
    if pending:  # a migration may record meta keys of its own
        written = yield from execute(ddl.read_meta_statement(schema))
        meta = {**{str(key): str(value) for key, value in written}, **meta}
    if tenant_index_min_facts is not None:
        meta[TENANT_INDEX_KEY] = str(tenant_index_min_facts)  # recorded, so every process agrees
    citus = bool((yield from execute(citus_version_statement())))
    recorded = meta.get(sql_layout.LAYOUT_KEY)
    if recorded is not None and layout not in (None, recorded):
        raise ConfigurationError(f"schema {schema!r} has the {recorded} layout; open it with layout=None")
    if recorded is None:
        chosen = new_store_layout(layout, citus=citus)
        for statement_ in chosen.create_statements(schema):
            yield from execute(statement_)
        meta[sql_layout.LAYOUT_KEY] = chosen.name
    for key, value in sorted(meta.items()):
        if stored_meta.get(key) != value:
            yield from execute(ddl.write_meta_statement(schema), (key, value))
    info = StoreInfo(
        schema=schema,
        model=stored_model,
        dimensions=stored_dims,
        text_search_config=shape.text_search_config,
        **(yield from _layout_fields(schema, meta, citus=citus)),
        legacy_starts_through=int(meta[ddl.LEGACY_STARTS_KEY]) if ddl.LEGACY_STARTS_KEY in meta else None,
        read_only=read_only,
    )
    if not read_only:
        yield from ensure_all_tenant_indexes(info)
    return info
