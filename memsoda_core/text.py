"""Pure text helpers: name normalization, single-line collapse, query cleaning and tokenization, and
the query of a long chat message (`message_query`)."""

from __future__ import annotations

import re
import unicodedata

from memsoda_core.limits import MAX_NAME_CHARS, MAX_NAME_TOKENS, MAX_QUERY_CHARS

_WHITESPACE_CATEGORIES = frozenset({"Cc", "Zs", "Zl", "Zp"})
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_TERM = re.compile(r"[^\W_]+")
_MAX_SPANS = 20_000
_MAX_TERMS = 64


def collapse_line(text: str) -> str:
    """Make `text` one line: every control, separator or line-break character becomes a space,
    bidirectional overrides are dropped, runs of spaces collapse, and the ends are trimmed."""
    if text.isprintable():
        # No control, separator (but the space), line break or format character (bidi controls are
        # format characters): str.split's whitespace is then exactly the space. The common case.
        return " ".join(text.split())
    out: list[str] = []
    for char in text:
        if char in _BIDI_CONTROLS:
            continue
        out.append(" " if unicodedata.category(char) in _WHITESPACE_CATEGORIES else char)
    return " ".join("".join(out).split())


def normalize_name(name: str) -> str:
    """Entity-name normal form: NFKC, lower-case, one line, whitespace collapsed."""
    return collapse_line(unicodedata.normalize("NFKC", name).lower())


def clean_query(query: str) -> str:
    """`query` with what neither PostgreSQL nor an embedder can take replaced: a NUL byte by a
    space, a lone surrogate by `?`. The one definition of query cleaning (`validation.check_query`)."""
    return query.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def message_query(message: str) -> str:
    """The query a chat message is recalled by: the message trimmed and, when longer than
    `limits.MAX_QUERY_CHARS` (all `recall` takes), its first that many characters. The head: a
    long message usually says what it wants before what it pastes ("Summarise this report: ..."),
    and embedders keep the head of a long input too, so the cut drops nothing the query's
    embedding would have used. Idempotent; the conversation signal cuts each turn by it."""
    return message.strip()[:MAX_QUERY_CHARS].rstrip()


def normalize_query(query: str) -> str:
    """A query, cleaned (`clean_query`), in the same normal form as entity names, so spans of it
    compare equal to names."""
    return normalize_name(clean_query(query))


def name_spans(normalized_query: str) -> list[str]:
    """Every substring of the query that could be a whole entity name, in order of appearance.

    A span starts at a token start and ends at a token end, where a token is a run of word
    characters or one other non-space character. So `art` is never a span of `start`, while `c++`,
    `node.js`, `(x)` and `50%` are spans of a query that contains them. Matching names against
    these spans by equality is a word-boundary match with no regular expression built from stored
    text, and an index lookup instead of a scan over every entity.
    """
    return list(name_spans_with_terms(normalized_query))


def name_spans_with_terms(normalized_query: str) -> dict[str, str]:
    """`name_spans`, each with its `normalized_terms` joined by spaces, in one pass: a term never
    crosses a token boundary, so a span's terms are its tokens' terms (no regex per span)."""
    tokens = [(m.start(), m.end(), _token_terms(m.group())) for m in _TOKEN.finditer(normalized_query)]
    spans: dict[str, str] = {}
    for i, (start, _, _) in enumerate(tokens):
        terms: set[str] = set()
        joined = ""  # the span's distinct terms so far, joined: each longer span adds its last token's
        for _, end, token_terms in tokens[i : i + MAX_NAME_TOKENS]:
            if end - start > MAX_NAME_CHARS:
                break
            for term in token_terms:
                if len(terms) < _MAX_TERMS and term not in terms:
                    terms.add(term)
                    joined = f"{joined} {term}" if joined else term
            spans.setdefault(normalized_query[start:end], joined)
            if len(spans) >= _MAX_SPANS:
                return spans
    return spans


def _token_terms(token: str) -> list[str]:
    r"""A token's `_TERM`s: an alphanumeric token is its one term (`[^\W_]` is what `str.isalnum`
    accepts), the common case, read without a regex."""
    return [token] if token.isalnum() else _TERM.findall(token)


def keyword_terms(text: str) -> list[str]:
    """Distinct alphanumeric terms, lower-cased, in order. Safe to join with ` | ` into a tsquery:
    they hold no tsquery operator, quote or backslash."""
    return normalized_terms(normalize_query(text))


def normalized_terms(normalized: str) -> list[str]:
    """`keyword_terms` of a text already in `normalize_query` form (a query, or a span of one)."""
    seen: dict[str, None] = {}
    for match in _TERM.finditer(normalized):
        seen.setdefault(match.group(), None)
        if len(seen) >= _MAX_TERMS:
            break
    return list(seen)


def fact_embedding_text(subject: str, predicate: str, obj: str, anchor: str) -> str:
    """The anchor-enriched text a fact is embedded as (the reference's format)."""
    return f"{subject} {predicate} {obj}. About: {anchor}."
