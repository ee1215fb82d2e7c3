"""The sha256 of every SQL statement memsoda builds, by name: `python tools/statement_hashes.py [--write]`.

Pure: no database. Each statement is rendered as it is sent (`as_string`, the schema "memsoda",
the scope ("dataset", "project") where a statement names one) and hashed; the lines
`<name> <sha256>`, sorted, are what tests/statement_hashes.txt pins (tests/test_statement_hashes.py),
so a change to any statement's text shows as the names whose hash moved. `--write` rewrites that
file; without it the lines go to stdout.

What is enumerated, and how it stays exhaustive:

- Recall: every plan `recall.signals.plan_for` gives over a product of requests (query or not,
  dated or not, embedding or not, each signal's `embeds` text embedded or not, hops, known_at,
  `recent.candidates`, restricted to given facts (`within`) or not), checked to run every
  registered signal; for each, every scope access the registered layouts (`layouts.REGISTRY`)
  derive for a scope's sizes (`ScopeSize`: none, small, large, placed, moved, and where a small
  scope's rows may have moved), the statements `recall_statements` renders and, where it runs,
  `kept_hits_statement`; the kept read per access.
- Every other builder: each public function of a `memsoda_core` module whose return annotation
  names a statement (`sql.Composed`, `sql.SQL`, `Compiled`, lists of them), called with every
  combination of `arguments()` for its parameters (a `bool` with both values); module-level statement
  constants; every `TableInsert` in either `WriteForm`; each layout's DDL; every migration.
  A builder found that takes a parameter `arguments()` cannot fill, and is neither a fragment
  (`FRAGMENTS`) nor enumerated in its own section (`SECTIONS`) nor left out (`LEFT_OUT`), is an
  error: teach this module its arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import itertools
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg import sql

import memsoda_core
from memsoda_core.forgetting.retention_statements import outlived_facts
from memsoda_core.items.statements import expired_item_facts, filter_sql
from memsoda_core.items.values import Condition
from memsoda_core.layouts import REGISTRY as LAYOUTS
from memsoda_core.layouts.access import ScopeAccess, ScopeSize
from memsoda_core.layouts.shards import ShardPlace
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.learning.sources import only_sourced_facts
from memsoda_core.options import DEFAULT_OPTIONS
from memsoda_core.recall.signals import REGISTRY as SIGNALS
from memsoda_core.recall.signals import RecallPlan, RecallRequest, plan_for, planned_signals
from memsoda_core.recall.statements import (
    facts_statement,
    kept_hits_statement,
    one_statement,
    recall_groups,
    recall_statements,
)
from memsoda_core.reembed.statements import TABLES as REEMBED_TABLES
from memsoda_core.reembed.statements import next_index
from memsoda_core.runner.compiled import Compiled
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.layout import PARTITIONED, READ_TABLES, leaf_indexes
from memsoda_core.store.schema import MIGRATIONS, StoreShape
from memsoda_core.store.statements import entity_facts
from memsoda_core.store.tenant_index import DEFAULT_MIN_FACTS, tenant_indexes
from memsoda_core.validation import Scope
from memsoda_core.writing.inserts import TableInsert
from memsoda_core.writing.reconcile_statements import CHAIN_DEPTH

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "statement_hashes.txt"

SCHEMA = "memsoda"
SCOPE = Scope(dataset="dataset", project="project")
MIN_FACTS = DEFAULT_MIN_FACTS
INFO = StoreInfo(
    schema=SCHEMA, model="model", dimensions=384, text_search_config="english", tenant_index_min_facts=MIN_FACTS
)

Statement = sql.Composable | Compiled
Entry = tuple[str, Statement]

FRAGMENTS = frozenset(
    {
        # pieces of statements, pinned through the statements that hold them
        "recall.fragments.where",
        "recall.fragments.fragment",
        "recall.signals.anchor.near_cte",
        "recall.signals.anchor.anchor_ctes",
        "recall.signals.conversation.conversation_cte",
        "recall.signals.date.date_cte",
        "recall.signals.entities.name_like",
        "recall.signals.entities.hub_floor_cte",
        "recall.signals.entities.named_cte",
        "recall.signals.live.once",
        "recall.scope_stats.latest_facts_query",
        "recall.signals.keyword.keyword_ctes",
        "recall.signals.recency.recent_cte",
        "recall.signals.vector.nearest_cte",
        "recall.signals.vector.vector_cte",
        "recall.statements.hits_statement",
        "store.fact_columns.fact_columns",
        "layouts.shards.placed_guard",
        "store.lexemes.fact_lexemes",
        "store.tenant_index.table_alias",
        "store.tenant_index.tenant_predicate",
        "store.tenant_index.scope_predicate",
        # composing helpers: any template
        "store.statements.tenant_statement",
        "store.template.schema_sql",
        "runner.compiled.compiled",
        "recall.statements.rendered",
        "recall.statements.for_scope",
    }
)

SECTIONS = frozenset(
    {
        "recall.statements.recall_statements",
        "recall.statements.kept_hits_statement",
        "recall.statements.facts_statement",
        "writing.inserts.chunks",  # every `TableInsert`, `_inserts`
    }
)

LEFT_OUT = {
    "store.layout.move_statements": "its columns are read from the database (`columns_statement`)",
}
"""Builders not enumerated, and why."""


def _labelled(*values: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((str(value), value) for value in values)


_CONDITIONS = (Condition(path=("a", "b"), op="$eq", value_json="1"), Condition(path=("c",), op="$gte", value_json="2"))


def arguments() -> dict[str, tuple[tuple[str, Any], ...]]:
    """(label, value) choices of a builder's parameter, by `module.function.parameter`, then
    `module.*.parameter`, then the parameter's name (a `bool` without one: both values)."""
    return {
        "schema": ((SCHEMA, SCHEMA),),
        "scope": (("scope", SCOPE),),
        "dimensions": _labelled(384),
        "depth": _labelled(CHAIN_DEPTH),
        "dataset": _labelled(None, "dataset"),
        "colocate_with": _labelled(None, "facts"),
        "database": _labelled("memsoda_db"),
        "name": _labelled("citus.max_adaptive_executor_pool_size"),
        "value": _labelled("1"),
        "tenant_tables": (("default", ("facts", "entities", "fact_entities")),),
        "filters": (("none", filter_sql([])[0]), ("eq+gte", filter_sql(list(_CONDITIONS))[0])),
        "doomed": (  # the selections `forgetting.deleting.delete_facts` is given
            ("outlived_facts", outlived_facts(SCHEMA, only_ids=True)),
            ("entity_facts", entity_facts(SCHEMA)),
            ("expired_item_facts", expired_item_facts(SCHEMA, CHAIN_DEPTH)),
            *(
                (f"only_sourced_facts(thread={t},messages={m})", only_sourced_facts(SCHEMA, thread=t, messages=m))
                for t, m in ((True, False), (False, True), (True, True))
            ),
        ),
        "index": tuple((index.name, index) for index in (*tenant_indexes(SCOPE), *leaf_indexes(SCOPE))),
        "renamed": (("none", ()), ("next", tuple(next_index(index).name for index in tenant_indexes(SCOPE)))),
        "access": tuple((name, access) for name, access, _ in scope_accesses()),
        "place": (("sharded", SHARDS),),
        "reembed.statements.*.table": _labelled(*REEMBED_TABLES),
        # `distribute` reads its tables from the store: these stand for them (only the quoted name varies)
        "distributed.*.table": _labelled("facts", "entities", "items", "meta"),
        "store.layout.analyze_leaf.table": _labelled(*PARTITIONED),
    }


def _statements(result: Any) -> list[Statement]:
    """The statements in a builder's result (a statement, or lists / tuples holding some)."""
    if isinstance(result, sql.Composable | Compiled):
        return [result]
    if isinstance(result, list | tuple):
        return [statement for item in result for statement in _statements(item)]
    return []


def text(statement: Statement) -> str:
    """The text sent (a `Compiled` statement's `$n` form; a composed one as psycopg renders it)."""
    return statement.as_string(None)


def _named(name: str, result: Any) -> Iterator[Entry]:
    statements = _statements(result)
    if len(statements) == 1:
        yield name, statements[0]
    else:
        for number, statement in enumerate(statements):
            yield f"{name}[{number}]", statement


# -- recall --------------------------------------------------------------------------------------

SHARDS = ShardPlace(
    relations=tuple((table, f"{table}_{102008 + i}") for i, table in enumerate(READ_TABLES)),
    shard_ids=tuple(102008 + i for i in range(len(READ_TABLES))),
    host="worker-1",
    port=5432,
)
"""A Citus worker's shards of a small scope (`layouts.shards`)."""

_SIZES: tuple[tuple[str, ScopeSize | None], ...] = (
    ("none", None),
    ("small", ScopeSize(0)),
    ("large", ScopeSize(MIN_FACTS)),
    ("placed", ScopeSize(0, placed=True)),
    ("moved", ScopeSize(MIN_FACTS, placed=True, moved=True)),
    ("sharded", ScopeSize(1, shards=SHARDS)),
)


def scope_accesses() -> list[tuple[str, ScopeAccess, int]]:
    """(name, access, the scope's facts) of every access a registered layout derives, those giving
    the same statement text named once (`layout:case+case`), in registry and size order."""
    out: list[tuple[str, ScopeAccess, int]] = []
    for layout_name in sorted(LAYOUTS):
        layout = LAYOUTS[layout_name]
        cases: dict[tuple[Any, ...], tuple[list[str], ScopeAccess, int]] = {}
        for label, size in _SIZES:
            facts = 0 if size is None else size.facts
            access = layout.access(INFO, SCOPE, size)
            found = [(label, access)]
            if access.moved is not None:
                found.append((f"{label}>moved", access.moved))
            if access.direct is not None:
                found.append((f"{label}>direct", access.direct))
            for case, derived in found:
                key = (derived.form, derived.kept_named, facts < MIN_FACTS)
                cases.setdefault(key, ([], derived, facts))[0].append(case)
        out += [(f"{layout_name}:{'+'.join(labels)}", access, facts) for labels, access, facts in cases.values()]
    return out


_AT = datetime(2026, 6, 1, tzinfo=UTC)
_QUERIES = (None, "what does sam like", "what did sam do last week")


def recall_plans() -> list[RecallPlan]:
    """Every plan `plan_for` gives over the request product (see the module's docstring), sorted."""
    plans: set[RecallPlan] = set()
    for query, embedding, hops, known, recent, within in itertools.product(
        _QUERIES, (None, (0.0, 1.0)), (1, 2), (False, True), (0, 50), (None, (1, 2))
    ):
        options = DEFAULT_OPTIONS.with_overrides({"anchor.hops": hops, "recent.candidates": recent})
        request = RecallRequest(
            scope=SCOPE,
            query=query,
            embedding=embedding,
            options=options,
            at=_AT,
            known_at=_AT if known else None,
            conversation=(("user", "an earlier turn"),),
            within=within,
        )
        embeds = [spec.name for spec in SIGNALS if spec.embeds(request) is not None]
        for embedded in itertools.product((False, True), repeat=len(embeds)):
            vectors = {name: (1.0, 0.0) for name, on in zip(embeds, embedded, strict=True) if on}
            plans.add(plan_for(RecallRequest(**{**_fields(request), "vectors": vectors})))
    ran = {name for plan in plans for name in plan.signals}
    if missing := [spec.name for spec in SIGNALS if spec.name not in ran]:
        raise RuntimeError(f"no request of tools/statement_hashes.py runs signal(s) {missing}: add one that does")
    return sorted(plans, key=plan_name)


def _fields(request: RecallRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in RecallRequest.__dataclass_fields__}


def plan_name(plan: RecallPlan) -> str:
    signals = "+".join(planned_signals(plan))
    within = ",within=1" if plan.within else ""  # the names of the plans without it as they were
    return (
        f"query={int(plan.query)},embedding={int(plan.embedding)},hops={plan.hops},known={int(plan.known)}"
        f"{within},{signals}"
    )


def _recall() -> Iterator[Entry]:
    accesses = scope_accesses()
    for access_name, access, facts in accesses:
        yield f"recall.statements.facts_statement({access_name})", facts_statement(SCHEMA, access)
        for plan in recall_plans():
            where = f"{access_name},{plan_name(plan)}"
            groups = recall_groups(plan)
            for group, statement in zip(groups, recall_statements(SCHEMA, plan, access), strict=True):
                yield f"recall.statements.recall_statements({where})[{'+'.join(group)}]", statement
            if one_statement(facts, MIN_FACTS, planned_signals(plan)):
                yield f"recall.statements.kept_hits_statement({where})", kept_hits_statement(SCHEMA, plan, access)
    yield "recall.statements.facts_statement(shared)", facts_statement(SCHEMA)


# -- everything else -----------------------------------------------------------------------------


def _modules() -> list[Any]:
    names = sorted(info.name for info in pkgutil.walk_packages(memsoda_core.__path__, "memsoda_core."))
    return [importlib.import_module(name) for name in names]


def _short(module: Any) -> str:
    return str(module.__name__).removeprefix("memsoda_core.")


def _is_statement_annotation(annotation: Any) -> bool:
    return any(word in str(annotation) for word in ("Composed", "Compiled", "sql.SQL"))


def builders() -> list[tuple[str, Callable[..., Any]]]:
    """(module.name, function) of every public function of memsoda_core returning statements."""
    found: list[tuple[str, Callable[..., Any]]] = []
    for module in _modules():
        for name, value in sorted(vars(module).items()):
            function = inspect.unwrap(value) if callable(value) else None
            if name.startswith("_") or not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            if _is_statement_annotation(inspect.signature(function).return_annotation):
                found.append((f"{_short(module)}.{name}", value))
    return found


Choices = dict[str, tuple[tuple[str, Any], ...]]


def _choices(qualified: str, parameter: inspect.Parameter, known: Choices) -> tuple[tuple[str, Any], ...] | None:
    module = qualified.rpartition(".")[0]
    for key in (f"{qualified}.{parameter.name}", f"{module}.*.{parameter.name}", parameter.name):
        if key in known:
            return known[key]
    if parameter.annotation == "bool":
        return _labelled(False, True)
    return None


def _called(qualified: str, builder: Callable[..., Any], known: Choices) -> Iterator[Entry]:
    """`builder` called with every combination of its parameters' choices (a parameter with a
    default and no choices keeps its default); a combination it refuses (ValueError) is skipped."""
    parameters: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for parameter in inspect.signature(builder).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        options = _choices(qualified, parameter, known)
        if options is None and parameter.default is parameter.empty:
            raise RuntimeError(
                f"{qualified}: no arguments for parameter {parameter.name!r}: teach tools/statement_hashes.py "
                "(`arguments`), or list it in FRAGMENTS, SECTIONS or LEFT_OUT"
            )
        if options is not None:
            parameters.append((parameter.name, options))
    for combination in itertools.product(*(options for _, options in parameters)):
        shown = [
            f"{name}={label}"
            for (name, options), (label, _) in zip(parameters, combination, strict=True)
            if len(options) > 1
        ]
        args = {name: value for (name, _), (_, value) in zip(parameters, combination, strict=True)}
        try:
            result = builder(**args)
        except ValueError:
            continue
        yield from _named(f"{qualified}({','.join(shown)})", result)


def _defined(kind: type | tuple[type, ...]) -> Iterator[tuple[str, Any]]:
    """(module.NAME, value) of every public module-level value of `kind`, named where it is
    assigned (not where it is imported)."""
    for module in _modules():
        source = Path(module.__file__).read_text()
        for name, value in sorted(vars(module).items()):
            if not name.startswith("_") and isinstance(value, kind) and re.search(rf"^{name}\b.*=", source, re.M):
                yield f"{_short(module)}.{name}", value


def _inserts() -> Iterator[Entry]:
    for name, insert in _defined(TableInsert):
        for form in WriteForm:
            for rows in (1, 2) if form is WriteForm.ROWS else (0,):
                shown = f"{form.name},rows={rows}" if form is WriteForm.ROWS else form.name
                yield f"{name}.statement({shown})", insert.statement(SCHEMA, form, rows)


def _constants() -> Iterator[Entry]:
    """Module-level statements, and tuples of them (`runner.policy.SESSION_SETTINGS`)."""
    for name, value in _defined((sql.Composable, Compiled, tuple)):
        if not isinstance(value, tuple) or (value and len(_statements(value)) == len(value)):
            yield from _named(name, value)


def _layouts_and_migrations() -> Iterator[Entry]:
    for name in sorted(LAYOUTS):
        layout = LAYOUTS[name]
        yield from _named(f"layouts.{name}.create_statements", layout.create_statements(SCHEMA))
        yield from _named(f"layouts.{name}.analyze_statements", layout.analyze_statements(SCHEMA))
        yield from _named(f"layouts.{name}.write_hold", layout.write_hold(SCHEMA))
    shape = StoreShape(schema=SCHEMA, dimensions=384, text_search_config="english")
    for version in sorted(MIGRATIONS):
        yield from _named(f"store.schema.MIGRATIONS[{version:02d}]", MIGRATIONS[version](shape))


def entries() -> list[Entry]:
    """Every (name, statement), sorted by name; names are unique."""
    known = arguments()
    found = builders()
    if stale := sorted((FRAGMENTS | SECTIONS | LEFT_OUT.keys()) - {qualified for qualified, _ in found}):
        raise RuntimeError(f"tools/statement_hashes.py names builders that no longer exist: {stale}")
    out = [*_recall(), *_inserts(), *_constants(), *_layouts_and_migrations()]
    for qualified, builder in found:
        if qualified not in FRAGMENTS | SECTIONS | LEFT_OUT.keys():
            out += _called(qualified, builder, known)
    names = [name for name, _ in out]
    if duplicated := sorted({name for name in names if names.count(name) > 1}):
        raise RuntimeError(f"statement names given twice: {duplicated[:5]}")
    if spaced := [name for name in names if " " in name]:
        raise RuntimeError(f"statement names hold a space: {spaced[:5]}")
    return sorted(out, key=lambda entry: entry[0])


def lines() -> list[str]:
    """`<name> <sha256 of its text>`, one per statement, sorted by name."""
    return [f"{name} {hashlib.sha256(text(statement).encode()).hexdigest()}" for name, statement in entries()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help=f"rewrite {GOLDEN.relative_to(GOLDEN.parents[1])}")
    args = parser.parse_args(argv)
    out = "".join(f"{line}\n" for line in lines())
    if args.write:
        GOLDEN.write_text(out)
        print(f"{GOLDEN}: {out.count(chr(10))} statements")
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
