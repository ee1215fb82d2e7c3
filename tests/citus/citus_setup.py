"""What the Citus tests share with their fixtures."""

SHARD_COUNT = 8
"""Fewer than Citus' 32 shards per table: the same routing, a faster setup."""
BIG = "ds-big"
"""The tenant the session isolates to a shard of its own."""
