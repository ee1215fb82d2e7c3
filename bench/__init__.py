"""memsoda benchmarks: retrieval quality on hand-labelled memories and speed at scale.

Run `python -m bench --help`. Every table in `bench/RESULTS.md` comes from one of its commands.
"""
