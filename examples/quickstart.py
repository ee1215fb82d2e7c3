"""Store three facts and recall them: the reference's Netflix bridge, end to end.

Runs offline against the embedded PostgreSQL (its data in a temporary directory, removed at the
end) with the bundled all-MiniLM-L6-v2 model.
"""

from __future__ import annotations

import tempfile

from memsoda_core import Memory


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="memsoda-quickstart-") as home:
        run(home)


def run(home: str) -> None:
    scope = {"dataset": "acme", "project": "assistant"}
    with Memory.open(home=home) as memory:
        memory.forget(**scope)  # start clean when re-run
        memory.add_facts(
            [
                {
                    "subject": "breaking bad",
                    "predicate": "streams on",
                    "object": "netflix",
                    "subject_type": "SHOW",
                    "object_type": "PRODUCT",
                    "valid_at": "2026-06-01",
                },
                {
                    "subject": "user",
                    "predicate": "favourite show is",
                    "object": "breaking bad",
                    "subject_type": "PERSON",
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
        print()
        for scored in result.facts:
            print(f"{scored.score:.4f}  {scored.fact.text:40}  {scored.reasons}")


if __name__ == "__main__":
    main()
