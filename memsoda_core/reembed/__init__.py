"""Changing a store's embedding model online (`Memory.reembed`, `memsoda reembed`).

statements.py     SQL: the next vector column, batches and their cursor, next indexes, the switch
operation.py      the operations: start or resume, a batch, the next indexes, the switch
async_api.py  reembed_store, the driver AsyncMemory.reembed calls (the source)
sync_api.py   its sync twin, which Memory.reembed calls, generated from async_api.py (do not edit)
"""

from memsoda_core.reembed.operation import ReembedReport

__all__ = ["ReembedReport"]
