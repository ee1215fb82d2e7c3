"""The write path, in one place: facts, entities, links and counts written in one transaction,
reconciled with what the scope holds.

- `operation`: add_facts and the steps every write shares (lock, read, decide, insert, end, merge)
- `decisions`: the pure decision (`plan_batch`): duplicates, single-valued relations, what ends
- `counts`: what a write adds to the scope's counts, bumped last in a fixed order
- `statements`: SQL of the entities a write reads and locks, the scope's row, episodes
- `reconcile_statements`: SQL of the per-relation locks, what a batch meets, ends and merges
- `inserts`: every insert from one column list per table, in the store's `WriteForm`
- `insert_rows`: run an insert in the store's form (chunks of rows on a distributed store)

Nothing here imports recall or the memory classes."""
