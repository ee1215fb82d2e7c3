"""Opening a store: create or upgrade the schema, check the embedder, record settings."""

from __future__ import annotations

from memsoda_core.distributed import citus_version_statement, facts_distributed_statement
from memsoda_core.embedders.choice import EXPLICIT, Origin, RecordedSpace, check_space
from memsoda_core.errors import (
    ConfigurationError,
    SchemaError,
)
from memsoda_core.ops.maintenance import ensure_all_tenant_indexes
from memsoda_core.runner.steps import Operation, execute
from memsoda_core.store import layout as sql_layout
from memsoda_core.store import schema as ddl
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo

TENANT_INDEX_KEY = "tenant_index_min_facts"
"""Meta key of the store's threshold for tenant indexes (set by the last open that gave one)."""


def recorded_space(schema: str) -> Operation[RecordedSpace | None]:
    """The model and dimension the store in `schema` records, or None before it is created."""
    ((exists,),) = yield from execute(ddl.meta_exists_statement(), {"schema": schema})
    if not exists:
        return None
    meta = {str(key): str(value) for key, value in (yield from execute(ddl.read_meta_statement(schema)))}
    if "model" not in meta or "dimensions" not in meta:
        return None
    return RecordedSpace(model=meta["model"], dimensions=int(meta["dimensions"]))


def open_store(
    *,
    schema: str,
    model: str,
    dimensions: int,
    text_search_config: str,
    tenant_index_min_facts: int | None,
    layout: str | None = None,
    origin: Origin = EXPLICIT,
) -> Operation[StoreInfo]:
    """Create or upgrade the schema (under an advisory lock), check the embedder matches, record
    `tenant_index_min_facts` if given (else use the recorded one, or the default), then build any
    tenant indexes a large scope lacks (after an upgrade, or an interrupted build). The layout
    (`store.layout.LAYOUTS`) is chosen once, when the store is created or upgraded to it: `layout`,
    else plain where Citus is installed and partitioned elsewhere. `origin` (why this embedder)
    words the advice of an `EmbedderMismatchError`."""
    statement, params = ddl.lock_statement(schema)
    yield from execute(statement, params)
    for bootstrap in ddl.bootstrap_statements(schema):
        yield from execute(bootstrap)
    meta = {str(key): str(value) for key, value in (yield from execute(ddl.read_meta_statement(schema)))}
    current = int(meta.get("schema_version", 0))
    if current > ddl.SCHEMA_VERSION:
        raise SchemaError(
            f"schema {schema!r} is at version {current}, newer than this memsoda supports "
            f"({ddl.SCHEMA_VERSION}); upgrade memsoda"
        )
    if current == 0:
        meta = {
            "model": model,
            "dimensions": str(dimensions),
            "text_search_config": text_search_config,
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
        # Citus distributes plain tables and gives a large tenant a shard of its own instead (rows
        # written to a DEFAULT partition of a distributed table were not found again in a probe).
        chosen = layout or ("plain" if citus else "partitioned")
        if chosen == "partitioned" and citus:
            raise ConfigurationError("the partitioned layout is not for a Citus database: open it with layout='plain'")
        if chosen == "partitioned":
            for statement_ in sql_layout.partition_statements(schema):
                yield from execute(statement_)
        meta[sql_layout.LAYOUT_KEY] = chosen
    for key, value in sorted(meta.items()):
        yield from execute(ddl.write_meta_statement(schema), (key, value))
    distributed = False
    if citus:
        ((distributed,),) = yield from execute(facts_distributed_statement(), {"schema": schema})
    info = StoreInfo(
        schema=schema,
        model=stored_model,
        dimensions=stored_dims,
        text_search_config=shape.text_search_config,
        tenant_index_min_facts=int(meta.get(TENANT_INDEX_KEY, sql_tenant_index.DEFAULT_MIN_FACTS)),
        distributed=bool(distributed),
        partitioned=meta[sql_layout.LAYOUT_KEY] == "partitioned",
        legacy_starts_through=int(meta[ddl.LEGACY_STARTS_KEY]) if ddl.LEGACY_STARTS_KEY in meta else None,
    )
    yield from ensure_all_tenant_indexes(info)
    return info
