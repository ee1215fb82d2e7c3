"""Documented maximums. Input over any of them raises a :class:`~memsoda_core.errors.ValidationError`."""

from __future__ import annotations

MAX_SCOPE_CHARS = 200
"""`dataset` and `project` names."""

MAX_NAME_CHARS = 200
"""Entity names: subject, object (when an entity), mentions, anchor."""

MAX_PREDICATE_CHARS = 500
MAX_OBJECT_CHARS = 2_000
"""A literal object may be longer than an entity name."""

MAX_TYPE_CHARS = 40
MAX_SOURCE_QUOTE_CHARS = 10_000
MAX_EPISODE_CHARS = 20_000
MAX_THREAD_ID_CHARS = 200
MAX_MENTIONS = 32

MAX_QUERY_CHARS = 4_000
"""Longer queries are rejected; embedders truncate far earlier anyway."""

MAX_TIMES_SEEN = 1_000_000_000
"""An imported fact's `times_seen`: within its column (a PostgreSQL integer) with room to count on."""

MAX_DIMENSIONS = 2_000
"""An embedder's dimension for a new store: pgvector's HNSW index on `vector` holds at most 2,000."""

MAX_BATCH = 10_000
"""Facts or episodes in one `add_facts` / `add_episodes` call (one transaction)."""

MAX_K = 200
"""`facts_in_context` (the adapters' `k`)."""

MAX_NAME_TOKENS = 12
"""Entity names are matched in a query over spans of at most this many tokens."""
