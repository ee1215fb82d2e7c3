"""Every store operation but recall, as a sans-I/O generator (see `memsoda_core.runner.steps`).

An operation yields requests and receives their replies; it runs in one transaction that the runner
opens at the first statement and commits when the operation returns (rolled back if it raises).
Embedding requests come before the first statement (a write's side read borrows a connection and
returns it at once), so no connection is held while a model runs; an import's later batches are the
exception, as they write inside the transaction of the whole file.
"""

from memsoda_core.ops.editing import add_episodes, invalidate, supersede
from memsoda_core.ops.maintenance import ensure_tenant_indexes, maintain
from memsoda_core.ops.opening import open_store
from memsoda_core.ops.reading import get_fact, history, list_facts, set_single_valued, single_valued_predicates
from memsoda_core.ops.stats import stats
from memsoda_core.ops.transfer import export_jsonl, import_records, parse_jsonl
from memsoda_core.writing.operation import add_facts

__all__ = [
    "add_episodes",
    "add_facts",
    "ensure_tenant_indexes",
    "export_jsonl",
    "get_fact",
    "history",
    "import_records",
    "invalidate",
    "list_facts",
    "maintain",
    "open_store",
    "parse_jsonl",
    "set_single_valued",
    "single_valued_predicates",
    "stats",
    "supersede",
]
