"""Store three facts and recall them: the reference's Netflix bridge, end to end. The README's
"Recall in ten lines", run against an embedded PostgreSQL whose data is in a temporary directory
(removed at the end), with the bundled all-MiniLM-L6-v2 model; it prints what the README shows.
"""

from __future__ import annotations

import tempfile

from memsoda_core import Memory


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-quickstart-") as home:
        run(home)


def run(home: str) -> None:
    with Memory.open(home=home) as memory:
        scope = {"dataset": "acme", "project": "assistant"}
        memory.add_facts(
            [
                {
                    "subject": "breaking bad",
                    "predicate": "streams on",
                    "object": "netflix",
                    "object_type": "PRODUCT",
                    "valid_at": "2026-06-01",
                },
                {
                    "subject": "user",
                    "predicate": "favourite show is",
                    "object": "breaking bad",
                    "object_type": "SHOW",
                    "valid_at": "2026-08-16",
                    "confidence": 0.9,
                    "source_quote": "my favourite show is Breaking Bad",
                },
                {
                    "subject": "user",
                    "predicate": "drives",
                    "object": "honda civic",
                    "object_type": "PRODUCT",
                    "valid_at": "2026-03-01",
                },
            ],
            **scope,
        )
        result = memory.recall("anything good on Netflix tonight?", **scope)
        print(result.context)
        for scored in result.facts:  # why each fact is there: per signal, what earned it its rank
            print(f"{scored.score:.4f}  {scored.fact.text:36}  {scored.reasons}")


if __name__ == "__main__":
    main()
