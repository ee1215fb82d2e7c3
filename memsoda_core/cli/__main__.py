"""`python -m memsoda_core.cli`: how `memsoda server start` runs its detached `server hold`."""

from memsoda_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
