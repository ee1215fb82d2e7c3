"""The replayed stream of `python -m bench stream`, built from the labelled persona (pure, seeded).

The stream (seeded, `build_stream`). Every persona fact arrives at its `valid_at`. The relations
single-valued by nature are those whose predicate is in `SINGLE_VALUED` (lives in, works at, works
as, job title is, manager is, home address is, monthly rent is, landlord is, annual salary is,
phone number is, phone is, banks with, credit card is, car insurer is, internet provider is,
laptop is, doctor is, dentist is, therapist is, vet is, pharmacy is, diet is, partner is, is
married to, emergency contact is, favourite restaurant is, favourite coffee shop is, usual coffee
order is, chess rating is, climbing grade is, resting heart rate is); the persona holds at most one
live value of each. A third of the live ones that can change (no word of their value in a query
they answer, the value the subject of no other fact, and not in `KEPT`: no question asks about the
old value and no bridge runs through it) change value once or twice, at random days between the
value's start and `END`, the new values drawn from `NEW_VALUES` (per predicate, never the
persona's own value). ~15% of the facts are repeated verbatim (the same record, including its
start) and ~10% of the open ones reworded (same subject and predicate, the object in other words:
`reword`; a restatement starting when it arrives), each arriving before its relation's first
change. Events are written in arrival order, `STEP` per `add_facts` call.

Gold. A query's gold fact of a changed relation becomes the relation's latest value (the key
`p002~2` for the second change of `p002`), and its earlier values join the query's stale facts. A
verbatim repeat or a rewording keeps its fact's key, so a copy in the top 8 takes a slot and finds
nothing new (`realmem.ranked_keys`: a repeated key counts once, at its first place).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.labelled import LabelledMemory, Query, import_record

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


def day(value: str) -> datetime:
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
    events = [Event(key=str(f["id"]), kind="fact", arrival=day(f["valid_at"]), record=import_record(f)) for f in facts]
    first_change: dict[str, datetime] = {}
    latest: dict[str, str] = {}
    versions: dict[str, list[str]] = {}
    changes: list[tuple[dict[str, Any], str]] = []
    for fact in chosen:
        key = str(fact["id"])
        times = sorted({_between(rng, day(fact["valid_at"]), END) for _ in range(rng.choice((1, 2)))})
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
        start, stop = day(fact["valid_at"]), first_change.get(key, END) - timedelta(days=1)
        at = _between(rng, start, stop) if stop - start >= timedelta(days=1) else start
        events.append(Event(key=key, kind="repeat", arrival=at, record=import_record(fact)))
    open_facts = [f for f in facts if f["invalid_at"] is None]
    for fact in rng.sample(open_facts, round(REWORD_SHARE * len(facts))):
        key = str(fact["id"])
        start, stop = day(fact["valid_at"]), first_change.get(key, END) - timedelta(days=1)
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
