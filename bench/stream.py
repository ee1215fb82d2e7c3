"""`python -m bench stream`: a replayed stream of changes built from the labelled persona, written
with reconciliation and as memsoda wrote before it, side by side in one store.

The stream (seeded, `build_stream`). Every persona fact arrives at its `valid_at`. The relations
single-valued by nature are those whose predicate is in `SINGLE_VALUED` (lives in, works at, works
as, job title is, manager is, home address is, monthly rent is, landlord is, annual salary is,
phone number is, phone is, banks with, credit card is, car insurer is, internet provider is,
laptop is, doctor is, dentist is, therapist is, vet is, pharmacy is, diet is, partner is, is
married to, emergency contact is, favourite restaurant is, favourite coffee shop is, usual coffee
order is, chess rating is, climbing grade is, resting heart rate is); the persona holds at most one
live value of each. A third of the live ones that can change (no word of their value in a
query they answer, the value the subject of no other fact, and not in `KEPT`: no question asks about the old
value and no bridge runs through it) change value once or twice, at random days between the
value's start and `END`, the new values drawn from `NEW_VALUES` (per predicate, never the
persona's own value). ~15% of the facts are repeated verbatim (the same record, including its
start) and ~10% of the open ones reworded (same subject and predicate, the object in other words:
`reword`; a restatement starting when it arrives), each arriving before its relation's first
change. Events are written in arrival order, `STEP` per `add_facts` call.

Gold. A query's gold fact of a changed relation becomes the relation's latest value (the key
`p002~2` for the second change of `p002`), and its earlier values join the query's stale facts. A
verbatim repeat or a rewording keeps its fact's key, so a copy in the top 8 takes a slot and finds
nothing new (`realmem.ranked_keys`: a repeated key counts once, at its first place).

With reconciliation: one scope, `set_single_valued(SINGLE_VALUED)`, every step through
`add_facts`; after each step the invariants (live duplicates: live facts equal case folded;
relations of `SINGLE_VALUED` holding more than one live value) are counted with SQL.

Without reconciliation (memsoda before issue 17: every write a new row, nothing ended), emulated
in a second scope of the same store: the same steps through `add_facts` with no single-valued
registration, so new values accumulate live as they did; a write the store now resolves to an
existing fact (add_facts returns an id it returned before: an equal fact, verbatim or case
folded) is then stored as old memsoda stored it, a new row: an SQL copy of the resolved row under
a new id with the event's object text, start, end, confidence and quote, its `fact_entities`
links copied and the entity and scope fact counts bumped. The vectors of the copies are the
resolved row's (the event's text differs at most in case, and the model is uncased). At the end
`times_seen` is reset to 1, the scope's lexeme counts recounted and `Memory.maintain()` run.

Both scopes are asked the persona's queries after the last step with `Memory.recall` (defaults,
now): recall@8 / MRR@8, stale facts in the top 8, slots of the top 8 taken by a copy.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import sql

from bench import metrics, near_duplicates, realmem
from bench.common import bench_memory, connect, environment, markdown_table
from bench.labelled import LabelledMemory, Query, import_record, load
from memsoda_core import Memory
from memsoda_core.embedders import Embedder
from memsoda_core.store.lexemes import recount_lexemes

DATASET = "bench-stream"
STEP = 4
END = datetime(2026, 11, 30, tzinfo=UTC)
REPEAT_SHARE = 0.15
REWORD_SHARE = 0.10
CHANGE_SHARE = 1 / 3

NEW_VALUES: dict[str, tuple[str, ...]] = {
    "lives in": ("amsterdam", "utrecht", "lisbon", "toronto", "boulder", "minneapolis", "san diego", "raleigh"),
    "works at": ("acme analytics", "globex", "initech", "umbrella health", "stark industries", "wayne foods"),
    "works as": ("a school counselor", "a software engineer", "a paramedic", "a data analyst", "a chef"),
    "job title is": ("staff data engineer", "engineering manager", "principal engineer", "data platform lead"),
    "manager is": ("carlos mendes", "hannah lee", "tom becker", "fatima noor"),
    "home address is": ("77 pine street, apartment 2", "310 elm avenue", "9 harbor road, unit 14"),
    "monthly rent is": ("2300 dollars", "1950 dollars", "2475 dollars"),
    "landlord is": ("front range rentals", "peak living llc", "mile high homes"),
    "annual salary is": ("156000 dollars", "165000 dollars", "172000 dollars"),
    "phone number is": ("937-555-0101", "937-555-0234", "614-555-0199"),
    "phone is": ("iphone 15", "pixel 9", "galaxy s24"),
    "banks with": ("chase", "capital one", "schwab bank", "wells fargo"),
    "credit card is": ("amex gold", "capital one venture", "citi double cash"),
    "car insurer is": ("state farm", "progressive", "allstate"),
    "internet provider is": ("centurylink", "google fiber", "t-mobile home internet"),
    "laptop is": ("thinkpad x1 carbon", "macbook pro m3", "dell xps 13"),
    "doctor is": ("dr. susan kim", "dr. omar haddad", "dr. julia fischer"),
    "dentist is": ("dr. mark ellis", "dr. priya shah", "dr. leo martin"),
    "therapist is": ("dr. ellen park", "dr. sam ortiz", "dr. rita gomez"),
    "vet is": ("dr. paul novak", "dr. mia chen", "dr. ivan petrov"),
    "pharmacy is": ("cvs on colfax", "king soopers pharmacy", "costco pharmacy"),
    "diet is": ("vegan", "pescatarian", "flexitarian"),
    "partner is": ("alex", "robin", "casey"),
    "is married to": ("maria", "lena", "sofia"),
    "emergency contact is": ("anna", "jordan", "ben"),
    "favourite restaurant is": ("the wolf's tailor", "sushi den", "tacos tequila whiskey"),
    "favourite coffee shop is": ("corvus coffee", "sweet bloom", "little owl"),
    "usual coffee order is": ("flat white", "iced americano", "chai latte"),
    "chess rating is": ("1685", "1720", "1598"),
    "climbing grade is": ("v5 bouldering", "v6 bouldering", "v3 bouldering"),
    "resting heart rate is": ("52 bpm", "57 bpm", "50 bpm"),
}
SINGLE_VALUED: tuple[str, ...] = tuple(NEW_VALUES)
KEPT = frozenset({"p071"})
"""Values that never change: the persona's query asks what the teacher teaches, which a new job
would not answer."""

_ABBREVIATIONS = (
    ("street", "st."),
    ("avenue", "ave."),
    ("apartment", "apt."),
    ("dollars", "usd"),
    ("dr. ", "doctor "),
    (" and ", " & "),
    ("bouldering", "boulder problems"),
    ("bpm", "beats per minute"),
)


def rewordings_of(text: str) -> list[str]:
    """The same value in other words: case, an article, an abbreviation, spacing or punctuation
    (one transformation each)."""
    options: list[str] = [text.title() if text.title() != text else text.upper()]
    article = re.match(r"(a|an|the) (.+)", text)
    options.append(article.group(2) if article else f"the {text}")
    for long, short in _ABBREVIATIONS:
        if long in text:
            options.append(text.replace(long, short, 1))
        elif short in text:
            options.append(text.replace(short, long, 1))
    if "," in text:
        options.append(text.replace(",", ""))
    if "-" in text:
        options.append(text.replace("-", " "))
    if " " in text:
        options.append(text.replace(" ", "  ", 1) + ".")
    return list(dict.fromkeys(o for o in options if o != text))


def reword(text: str, rng: random.Random) -> str:
    """One of `rewordings_of(text)`, at random."""
    return rng.choice(rewordings_of(text))


@dataclass(frozen=True, kw_only=True)
class Event:
    key: str
    """The label key of the value: the persona's key, `key~n` for the n-th change."""
    kind: str
    """fact, repeat, reword or change"""
    arrival: datetime
    record: dict[str, Any]


@dataclass
class Stream:
    events: list[Event]
    latest: dict[str, str]
    """persona key of a changed relation -> the key of its latest value"""
    versions: dict[str, list[str]]
    """persona key of a changed relation -> the keys of its earlier values, oldest first"""
    rewordings: list[tuple[dict[str, Any], str]]
    """(the persona record, the reworded object)"""
    changes: list[tuple[dict[str, Any], str]]
    """(the record of the value replaced, the new object)"""

    def queries(self, labelled: LabelledMemory) -> list[Query]:
        """The persona's queries with their gold moved to the latest values (`latest`)."""
        out = []
        for query in labelled.queries:
            moved = [k for k in query.gold if k in self.latest]
            stale = list(query.stale) + [v for k in moved for v in self.versions[k]]
            gold = tuple(self.latest.get(k, k) for k in query.gold)
            out.append(Query(id=query.id, kind=query.kind, text=query.text, gold=gold, stale=tuple(stale)))
        return out

    def changed(self, query: Query) -> bool:
        return any(k in self.latest.values() for k in query.gold)


_STOP = frozenset({"a", "an", "the", "on", "at", "in", "of", "and", "is", "my"})


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def _day(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def _between(rng: random.Random, start: datetime, end: datetime) -> datetime:
    days = max(1, (end - start).days)
    return start + timedelta(days=rng.randint(1, days))


def build_stream(labelled: LabelledMemory, *, seed: int = 17) -> Stream:
    """The events of the stream in arrival order (see the module docstring)."""
    rng = random.Random(seed)
    facts = list(labelled.facts)
    named: dict[str, set[str]] = {}
    for query in labelled.queries:
        for key in query.gold:
            named.setdefault(key, set()).update(_words(query.text))
    subjects = {f["subject"] for f in facts}
    single = [f for f in facts if f["predicate"] in NEW_VALUES and f["invalid_at"] is None]
    relations = [(f["subject"], f["predicate"]) for f in single]
    assert len(set(relations)) == len(relations), "the persona holds one live value per single-valued relation"
    movable = [
        f
        for f in single
        if f["object"] not in subjects
        and not _words(f["object"]) & named.get(str(f["id"]), set())
        and str(f["id"]) not in KEPT
    ]
    chosen = rng.sample(movable, round(CHANGE_SHARE * len(single)))
    events = [Event(key=str(f["id"]), kind="fact", arrival=_day(f["valid_at"]), record=import_record(f)) for f in facts]
    first_change: dict[str, datetime] = {}
    latest: dict[str, str] = {}
    versions: dict[str, list[str]] = {}
    changes: list[tuple[dict[str, Any], str]] = []
    for fact in chosen:
        key = str(fact["id"])
        times = sorted({_between(rng, _day(fact["valid_at"]), END) for _ in range(rng.choice((1, 2)))})
        values = rng.sample([v for v in NEW_VALUES[fact["predicate"]] if v != fact["object"]], len(times))
        first_change[key] = times[0]
        versions[key] = [key]
        previous = fact
        for n, (at, value) in enumerate(zip(times, values, strict=True), start=1):
            record = {**import_record(fact), "object": value, "valid_at": at.date().isoformat()}
            events.append(Event(key=f"{key}~{n}", kind="change", arrival=at, record=record))
            changes.append((previous, value))
            previous = {**fact, "object": value}
            versions[key].append(f"{key}~{n}")
        latest[key] = versions[key].pop()
    rewordings: list[tuple[dict[str, Any], str]] = []
    for fact in rng.sample(facts, round(REPEAT_SHARE * len(facts))):
        key = str(fact["id"])
        start, stop = _day(fact["valid_at"]), first_change.get(key, END) - timedelta(days=1)
        at = _between(rng, start, stop) if stop - start >= timedelta(days=1) else start
        events.append(Event(key=key, kind="repeat", arrival=at, record=import_record(fact)))
    open_facts = [f for f in facts if f["invalid_at"] is None]
    for fact in rng.sample(open_facts, round(REWORD_SHARE * len(facts))):
        key = str(fact["id"])
        start, stop = _day(fact["valid_at"]), first_change.get(key, END) - timedelta(days=1)
        if stop - start < timedelta(days=2):
            continue
        at = _between(rng, start, stop)
        text = reword(fact["object"], rng)
        record = {**import_record(fact), "object": text, "valid_at": at.date().isoformat()}
        events.append(Event(key=key, kind="reword", arrival=at, record=record))
        rewordings.append((fact, text))
    order = {"fact": 0, "repeat": 1, "reword": 2, "change": 3}
    events.sort(key=lambda e: (e.arrival, order[e.kind], e.key))
    return Stream(events=events, latest=latest, versions=versions, rewordings=rewordings, changes=changes)


# --- the two scopes --------------------------------------------------------------------------------

CHECK = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL
         GROUP BY subject, lower(predicate), lower(object) HAVING count(*) > 1) x) AS duplicates,
       (SELECT count(*) FROM (SELECT 1 FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL
           AND lower(predicate) = ANY(%(singles)s)
         GROUP BY subject, lower(predicate) HAVING count(*) > 1) y) AS multi_valued,
       (SELECT count(*) FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL) AS live
"""


@dataclass
class Written:
    keys: dict[int, str] = field(default_factory=dict)
    """fact id -> label key"""
    steps: int = 0
    duplicates: int = 0
    """live duplicate groups, summed over the steps"""
    multi_valued: int = 0
    """single-valued relations with more than one live value, summed over the steps"""
    violating_steps: int = 0
    final: tuple[int, int, int] = (0, 0, 0)
    """(duplicates, multi_valued, live facts) after the last step"""
    copies: int = 0


def _copy_statement(conn: Any, schema: str) -> sql.Composed:
    """INSERT ... SELECT of a stored fact under a new id, with the event's values (see the module
    docstring); every other column copied."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'facts' "
        "AND is_generated = 'NEVER' AND column_name <> 'id' ORDER BY ordinal_position",
        (schema,),
    ).fetchall()
    given = {
        "object": sql.SQL("%(object)s"),
        "valid_at": sql.SQL("%(valid_at)s"),
        "invalid_at": sql.SQL("%(invalid_at)s"),
        "confidence": sql.SQL("%(confidence)s"),
        "source_quote": sql.SQL("%(quote)s"),
        "created_at": sql.SQL("now()"),
        "times_seen": sql.SQL("1"),
        "superseded_by": sql.SQL("NULL"),
        "expired_at": sql.SQL("NULL"),
    }
    columns = [r[0] for r in rows]
    chosen = [given.get(c, sql.Identifier(c)) for c in columns]
    return sql.SQL(
        "INSERT INTO {s}.facts ({cols}) SELECT {vals} FROM {s}.facts "
        "WHERE dataset = %(d)s AND project = %(p)s AND id = %(id)s RETURNING id"
    ).format(
        s=sql.Identifier(schema), cols=sql.SQL(", ").join(map(sql.Identifier, columns)), vals=sql.SQL(", ").join(chosen)
    )


def _store_as_before(
    conn: Any, schema: str, copy: sql.Composed, scope: dict[str, str], fact_id: int, event: Event
) -> int:
    """The event as a new row, as memsoda stored every write before reconciliation."""
    s = sql.Identifier(schema)
    record = event.record
    bound = {
        "d": scope["dataset"],
        "p": scope["project"],
        "id": fact_id,
        "object": record["object"],
        "valid_at": _day(record["valid_at"]),
        "invalid_at": _day(record["invalid_at"]) if record.get("invalid_at") else None,
        "confidence": record.get("confidence", 1.0),
        "quote": record.get("source_quote"),
    }
    with conn.transaction():
        row = conn.execute(copy, bound).fetchone()
        new_id = int(row[0])
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.fact_entities (dataset, project, entity_id, fact_id, roles) "
                "SELECT dataset, project, entity_id, %(new)s, roles FROM {s}.fact_entities "
                "WHERE dataset = %(d)s AND project = %(p)s AND fact_id = %(id)s"
            ).format(s=s),
            {**bound, "new": new_id},
        )
        conn.execute(
            sql.SQL(
                "UPDATE {s}.entities e SET fact_count = e.fact_count + 1 FROM {s}.fact_entities fe "
                "WHERE fe.dataset = %(d)s AND fe.project = %(p)s AND fe.fact_id = %(new)s "
                "AND e.dataset = fe.dataset AND e.project = fe.project AND e.id = fe.entity_id"
            ).format(s=s),
            {**bound, "new": new_id},
        )
        conn.execute(
            sql.SQL(
                "UPDATE {s}.scopes SET fact_count = fact_count + 1 WHERE dataset = %(d)s AND project = %(p)s"
            ).format(s=s),
            bound,
        )
    return new_id


def write(memory: Memory, stream: Stream, scope: dict[str, str], *, reconcile: bool, step: int = STEP) -> Written:
    """The stream into `scope`, `step` events per `add_facts`, checked after every step."""
    schema = memory.info.schema
    written = Written()
    if reconcile:
        memory.set_single_valued(list(SINGLE_VALUED), dataset=scope["dataset"], project=scope["project"])
    check = sql.SQL(CHECK).format(s=sql.Identifier(schema))
    with connect(memory.dsn) as conn:
        copy = _copy_statement(conn, schema)
        for start in range(0, len(stream.events), step):
            batch = stream.events[start : start + step]
            ids = memory.add_facts([e.record for e in batch], dataset=scope["dataset"], project=scope["project"])
            for fact_id, event in zip(ids, batch, strict=True):
                if not reconcile and fact_id in written.keys:
                    fact_id = _store_as_before(conn, schema, copy, scope, fact_id, event)
                    written.copies += 1
                written.keys.setdefault(fact_id, event.key)
            row = conn.execute(
                check, {"d": scope["dataset"], "p": scope["project"], "singles": list(SINGLE_VALUED)}
            ).fetchone()
            assert row is not None
            written.steps += 1
            written.duplicates += int(row[0])
            written.multi_valued += int(row[1])
            written.violating_steps += int(row[0] > 0 or row[1] > 0)
            written.final = (int(row[0]), int(row[1]), int(row[2]))
        if not reconcile:
            tenant = {"dataset": scope["dataset"], "project": scope["project"]}
            conn.execute(
                sql.SQL(
                    "UPDATE {s}.facts SET times_seen = 1 WHERE dataset = %(dataset)s AND project = %(project)s"
                ).format(s=sql.Identifier(schema)),
                tenant,
            )
            conn.execute(recount_lexemes(schema, scoped=True), tenant)
    if not reconcile:
        memory.maintain()
    return written


@dataclass
class Scores:
    recall: dict[str, list[float]] = field(default_factory=dict)
    mrr: dict[str, list[float]] = field(default_factory=dict)
    stale: dict[str, list[float]] = field(default_factory=dict)
    copies: dict[str, list[float]] = field(default_factory=dict)
    """slots of the top 8 taken by a repeated key"""

    def add(self, groups: Sequence[str], ranked: Sequence[str], query: Query) -> None:
        for group in groups:
            self.recall.setdefault(group, []).append(metrics.recall_at(ranked, query.gold))
            self.mrr.setdefault(group, []).append(metrics.mrr_at(ranked, query.gold))
            self.stale.setdefault(group, []).append(metrics.stale_at(ranked, query.stale))
            self.copies.setdefault(group, []).append(float(sum(k.startswith("repeat:") for k in ranked)))


def score(memory: Memory, stream: Stream, queries: Sequence[Query], scope: dict[str, str], written: Written) -> Scores:
    scores = Scores()
    for query in queries:
        found = memory.recall(query.text, dataset=scope["dataset"], project=scope["project"])
        ranked = realmem.ranked_keys([s.fact.id for s in found.facts], written.keys)
        groups = ["all", query.kind]
        if stream.changed(query):
            groups.append("changed")
        scores.add(groups, ranked, query)
    return scores


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


GROUPS = ("all", "changed", "paraphrase", "exact", "bridge", "invalidated")


def run(*, embedder: Embedder, seed: int = 17, step: int = STEP) -> str:
    labelled = load("persona")
    stream = build_stream(labelled, seed=seed)
    queries = stream.queries(labelled)
    kinds: dict[str, int] = {}
    for event in stream.events:
        kinds[event.kind] = kinds.get(event.kind, 0) + 1
    stamp = time.time_ns()
    scopes = {
        "with": {"dataset": DATASET, "project": f"with-{stamp}"},
        "without": {"dataset": DATASET, "project": f"without-{stamp}"},
    }
    out = ["## A replayed stream of changes (`python -m bench stream`)\n", environment(), ""]
    changed_relations = len(stream.latest)
    out.append(
        f"Stream (seed {seed}): {len(stream.events)} events in {-(-len(stream.events) // step)} steps of {step}: "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f"; {changed_relations} single-valued relations changed "
        f"({sum(len(v) for v in stream.versions.values())} values replaced); "
        f"{sum(stream.changed(q) for q in queries)} queries whose gold moved to a latest value.\n"
    )
    with bench_memory(embedder) as memory:
        began = time.perf_counter()
        written = {
            label: write(memory, stream, scope, reconcile=label == "with", step=step) for label, scope in scopes.items()
        }
        spent = time.perf_counter() - began
        scores = {label: score(memory, stream, queries, scopes[label], written[label]) for label in scopes}
        for scope in scopes.values():
            memory.forget(dataset=scope["dataset"], project=scope["project"])
        similarities = near_duplicates.measure(memory.embedder, stream)
    rows = []
    for label, name in (("with", "with reconciliation"), ("without", "without (every write a new row)")):
        w = written[label]
        rows.append(
            [
                name,
                w.steps,
                w.violating_steps,
                w.duplicates,
                w.multi_valued,
                w.final[0],
                w.final[1],
                w.final[2],
                w.copies,
            ]
        )
    out.append(f"### Invariants after every step (both scopes written in {spent:.0f} s)\n")
    out.append(
        markdown_table(
            [
                "scope",
                "steps",
                "steps violating",
                "duplicate groups (sum over steps)",
                ">1 live value (sum over steps)",
                "duplicate groups at the end",
                ">1 live value at the end",
                "live facts at the end",
                "rows copied (writes old memsoda stored anew)",
            ],
            rows,
        )
    )
    out.append("\n### The persona's queries at the end of the stream (`Memory.recall`, defaults)\n")
    header = ["group", "queries", "recall@8 with", "recall@8 without", "MRR@8 with", "MRR@8 without"]
    header += ["stale in top 8 with", "stale in top 8 without", "copies in top 8 with", "copies in top 8 without"]
    table = []
    for group in GROUPS:
        if group not in scores["with"].recall:
            continue
        a, b = scores["with"], scores["without"]
        table.append(
            [
                group,
                len(a.recall[group]),
                _mean(a.recall[group]),
                _mean(b.recall[group]),
                _mean(a.mrr[group]),
                _mean(b.mrr[group]),
                _mean(a.stale[group]),
                _mean(b.stale[group]),
                _mean(a.copies[group]),
                _mean(b.copies[group]),
            ]
        )
    out.append(markdown_table(header, table))
    out.append(
        "\nstale in top 8: share of queries with an earlier value of a relation (or a fact the persona "
        "marks stale) in the top 8; copies: mean top-8 slots taken by a repeat of a fact already ranked.\n"
    )
    out.append(similarities)
    return "\n".join(out) + "\n"
