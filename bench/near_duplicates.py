"""Near duplicates (issue 17): can a similarity threshold tell a rewording of a relation's value
from a new value, so that writes could merge the first and keep the second?

Pairs of one relation (same subject and predicate), two objects that differ after case folding
(equal case-folded objects are merged by every write already):
- same value: every rewording `bench.stream_build.rewordings_of` gives of every open persona fact's
  object (an article, an abbreviation, spacing or punctuation; case-only ones left out);
- different values: the stream's changes (a value and the one replacing it), every pair of values
  of a single-valued predicate (`NEW_VALUES` and the persona's own values of it: "lives in
  amsterdam" / "lives in utrecht"), and the persona's own relations holding two values;
- unlabelled, for scale: consecutive versions of one 【Tag】 note of a realmem-dev persona
  (a rewording or a real update: the data does not say which).

Each pair's cosine similarity with the store's embedder, of the objects alone and of the facts'
embedding texts (`ValidFact.embedding_text`, what memsoda embeds). Pure but for the embedder.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from bench import realmem
from bench.common import markdown_table
from bench.labelled import load
from memsoda_core.embedders import Embedder
from memsoda_core.validation import validate_fact

if TYPE_CHECKING:
    from bench.stream_build import Stream

Pair = tuple[dict[str, Any], str, str]
"""(a record of the relation, one object, the other)"""

REALMEM_PAIRS = 400
EXAMPLES = 5


def labelled_pairs(stream: Stream) -> tuple[list[Pair], list[Pair]]:
    """(same-value pairs, different-value pairs), see the module docstring."""
    from bench.stream_build import NEW_VALUES, rewordings_of

    facts = load("persona").facts
    same = [
        (f, f["object"], other)
        for f in facts
        if f["invalid_at"] is None
        for other in rewordings_of(f["object"])
        if other.lower() != f["object"].lower()
    ]
    different = [(f, f["object"], new) for f, new in stream.changes]
    for predicate, values in NEW_VALUES.items():
        own = [f for f in facts if f["predicate"] == predicate]
        if not own:
            continue
        pool = sorted({*values, *(f["object"] for f in own)})
        different += [(own[0], a, b) for a, b in itertools.combinations(pool, 2)]
    relations: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for f in facts:
        relations.setdefault((f["subject"], f["predicate"]), []).append(f)
    for group in relations.values():
        different += [(a, a["object"], b["object"]) for a, b in itertools.combinations(group, 2)]
    seen: set[tuple[str, str, str, str]] = set()
    unique = []
    for record, a, b in different:
        key = (record["subject"], record["predicate"], *sorted((a.lower(), b.lower())))
        if a.lower() != b.lower() and key not in seen:
            seen.add(key)
            unique.append((record, a, b))
    return same, unique


def realmem_pairs(limit: int = REALMEM_PAIRS) -> list[Pair]:
    """Consecutive versions of one tagged note of each realmem-dev persona, up to `limit`."""
    if not realmem.available():
        return []
    pairs: list[Pair] = []
    for path in realmem.personas():
        last: dict[str, dict[str, Any]] = {}
        for session in realmem.sessions(path):
            for content in session.memories:
                record = realmem.fact_record(content, session.at)
                if record["predicate"] == "noted":
                    continue
                previous = last.get(record["predicate"])
                if previous is not None and previous["object"].lower() != record["object"].lower():
                    pairs.append((record, previous["object"], record["object"]))
                last[record["predicate"]] = record
    return pairs[:limit]


def similarities(embedder: Embedder, pairs: Sequence[Pair], *, whole: bool) -> np.ndarray[Any, Any]:
    """Cosine similarity of each pair: of the objects, or (`whole`) of the facts' embedding texts."""
    if not pairs:
        return np.zeros(0)

    def text(record: dict[str, Any], value: str) -> str:
        if not whole:
            return value
        body: dict[str, Any] = {k: record[k] for k in ("subject", "predicate", "object_type") if k in record}
        return validate_fact({**body, "object": value}).embedding_text

    left = np.asarray(embedder.embed_documents([text(r, a) for r, a, _ in pairs]), dtype=np.float64)
    right = np.asarray(embedder.embed_documents([text(r, b) for r, _, b in pairs]), dtype=np.float64)
    left /= np.linalg.norm(left, axis=1, keepdims=True)
    right /= np.linalg.norm(right, axis=1, keepdims=True)
    return np.asarray(np.sum(left * right, axis=1))


_ARTICLE = re.compile(r"^(a|an|the)\s+")
_PUNCTUATION = re.compile(r"[.,;:!?'\"()\-]+")


def lexical_key(text: str) -> str:
    """A wording-blind key with no model: case folded, a leading article, punctuation and repeated
    spaces dropped (abbreviations and synonyms are not covered)."""
    folded = " ".join(_PUNCTUATION.sub(" ", text.casefold()).split())
    return _ARTICLE.sub("", folded)


def lexical_merges(pairs: Sequence[Pair]) -> int:
    """How many pairs `lexical_key` would merge."""
    return sum(lexical_key(a) == lexical_key(b) for _, a, b in pairs)


QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def best_threshold(same: np.ndarray[Any, Any], different: np.ndarray[Any, Any]) -> dict[str, float]:
    """Merge when similarity >= t: the t of the best F1 for "same value" and its precision and
    recall, and the lowest t that merges no different values, with its recall."""
    best = {"t": 1.0, "f1": -1.0, "precision": 0.0, "recall": 0.0}
    for t in np.unique(np.concatenate([same, different])):
        tp = float(np.sum(same >= t))
        fp = float(np.sum(different >= t))
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / len(same) if len(same) else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        if f1 > best["f1"]:
            best = {"t": float(t), "f1": f1, "precision": precision, "recall": recall}
    safe = float(np.max(different)) + 1e-6 if len(different) else 0.0
    best["safe_t"] = safe
    best["safe_recall"] = float(np.mean(same >= safe)) if len(same) else 0.0
    best["wrong_merges_at_best"] = float(np.sum(different >= best["t"]))
    return best


def measure(embedder: Embedder, stream: Stream) -> str:
    """The markdown section: the distributions and the thresholds."""
    same, different = labelled_pairs(stream)
    loose = realmem_pairs()
    out = ["### Near duplicates: similarity of a rewording against a new value\n"]
    out.append(
        f"{len(same)} same-value pairs (rewordings), {len(different)} different-value pairs of one relation, "
        f"{len(loose)} consecutive realmem tag versions (unlabelled).\n"
    )
    rows = []
    verdicts = []
    examples = []
    for whole, label in ((False, "object"), (True, "fact text")):
        a = similarities(embedder, same, whole=whole)
        b = similarities(embedder, different, whole=whole)
        for index in np.argsort(-b)[:EXAMPLES]:
            record, x, y = different[index]
            examples.append(
                [label, "different values, most similar", f"{record['predicate']}: {x} / {y}", float(b[index])]
            )
        for index in np.argsort(a)[:EXAMPLES]:
            record, x, y = same[index]
            examples.append([label, "same value, least similar", f"{record['predicate']}: {x} / {y}", float(a[index])])
        c = similarities(embedder, loose, whole=whole)
        for name, values in (("same value", a), ("different values", b), ("realmem tag versions", c)):
            if len(values):
                rows.append([label, name, len(values), *(float(np.quantile(values, q)) for q in QUANTILES)])
        best = best_threshold(a, b)
        verdicts.append(
            [
                label,
                best["t"],
                best["precision"],
                best["recall"],
                int(best["wrong_merges_at_best"]),
                best["safe_t"],
                best["safe_recall"],
            ]
        )
    out.append(markdown_table(["embedding", "pairs", "n", "min", "p5", "p25", "p50", "p75", "p95", "max"], rows))
    out.append("")
    out.append(
        markdown_table(
            [
                "embedding",
                "best-F1 threshold",
                "precision (same value)",
                "recall",
                "wrong merges (new values lost)",
                "no-wrong-merge threshold",
                "its recall",
            ],
            verdicts,
        )
    )
    out.append(
        f"\nNo model, `lexical_key` equality (case, a leading article, punctuation, spacing): merges "
        f"{lexical_merges(same)}/{len(same)} same-value pairs and {lexical_merges(different)}/{len(different)} "
        f"different-value pairs; {lexical_merges(loose)}/{len(loose)} realmem tag versions.\n"
    )
    out.append(markdown_table(["embedding", "pairs", "example", "similarity"], examples))
    return "\n".join(out) + "\n"
