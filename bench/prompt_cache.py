"""`python -m bench profile`: does the prompt stay cacheable, and what does the standing profile add to
recall? Replayed on the RealMem dev personas exactly as `bench.realmem` replays them (one fresh scope
each, sessions in time order, a session's memory points stored after it, questions asked at the
session's time).

Every question (a user turn with gold `memory_used`) is a turn of an agent whose prompt is built two ways:

- **recall in the system prompt** (what agents do today): system = instructions + the recall block of
  `Memory.recall(question)`, then the session's conversation up to the question;
- **profile + recall after the conversation**: system = instructions + `Memory.profile()`, then the
  conversation up to the question, then the block of `Memory.recall(question, exclude=profile.fact_ids)`.

A turn is *warm* when the previous turn's prompt up to (and with) its latest message is a byte prefix
of this turn's prompt: a provider's prompt cache serves all of it. Across a session boundary the
conversation starts again, so only the system prompt can be reused: the second figure counts turns
whose system prompt is byte-identical to the previous turn's. Recall@8 compares the gold points found
by the recall alone (8 facts), by profile + recall (the profile's facts and 8 others) and, for an
equal number of facts shown, by a recall of 8 + the profile's size.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import metrics, realmem
from bench.common import markdown_table
from memsoda_core import Memory
from memsoda_core.validation import Scope

INSTRUCTIONS = "You are a helpful assistant with a long-term memory of the user."
_SEP = "\x1e"  # between messages of a serialised prompt; no stored text holds it


@dataclass
class Tally:
    turns: int = 0
    warm_plain: int = 0
    warm_profile: int = 0
    same_system_plain: int = 0
    same_system_profile: int = 0
    boundaries: int = 0
    boundary_system_profile: int = 0
    warm_within_profile: int = 0
    """Warm turns (profile layout) that are not the first of their session."""
    recall: list[float] = field(default_factory=list)
    profile_recall: list[float] = field(default_factory=list)
    equal_budget: list[float] = field(default_factory=list)
    profile_sizes: list[int] = field(default_factory=list)
    profile_versions: set[str] = field(default_factory=set)
    seconds: float = 0.0


def serialise(system: str, messages: Sequence[tuple[str, str]]) -> str:
    return _SEP.join([f"system:{system}", *(f"{role}:{content}" for role, content in messages)])


def with_block(instructions: str, block: str) -> str:
    return f"{instructions}\n\n{block}" if block else instructions


def covered(ids: Sequence[int], keys: dict[int, str], gold: frozenset[str]) -> float:
    """Share of the gold points among the memory points of `ids` (all of them, not a top k)."""
    return len({keys[i] for i in ids} & gold) / len(gold) if gold else 0.0


def replay(memory: Memory, path: Path, *, max_facts: int, max_questions: int | None, tally: Tally) -> None:
    name = path.name.split("_dialogues")[0]
    scope = Scope(dataset=realmem.DATASET, project=f"profile-{name}-{int(time.time() * 1000)}")
    keys: dict[int, str] = {}
    started = time.perf_counter()
    last_plain: tuple[str, str] | None = None  # (system, prompt through its latest message)
    last_profile: tuple[str, str] | None = None
    asked = 0
    for session in realmem.sessions(path):
        if max_questions is not None and asked >= max_questions:
            break
        first_of_session = True
        texts = [q[2] for q in session.questions]
        vectors = memory.embedder.embed_documents(texts) if texts else []
        for (_, _, text, gold, prior), vector in zip(session.questions, vectors, strict=False):
            if max_questions is not None and asked >= max_questions:
                break
            asked += 1
            conversation = [*prior, ("user", text)]
            plain = memory.recall(
                text, dataset=scope.dataset, project=scope.project, query_embedding=vector, as_of=session.at
            )
            profile = memory.profile(dataset=scope.dataset, project=scope.project, max_facts=max_facts)
            rest = memory.recall(
                text,
                dataset=scope.dataset,
                project=scope.project,
                query_embedding=vector,
                as_of=session.at,
                exclude=profile.fact_ids,
            )
            wide = memory.recall(
                text,
                dataset=scope.dataset,
                project=scope.project,
                query_embedding=vector,
                as_of=session.at,
                facts_in_context=metrics.K + len(profile.fact_ids),
            )
            system_plain = with_block(INSTRUCTIONS, plain.context)
            system_profile = with_block(INSTRUCTIONS, profile.text)
            head_plain = serialise(system_plain, conversation)
            head_profile = serialise(system_profile, conversation)
            full_profile = head_profile + (_SEP + f"user:{rest.context}" if rest.context else "")
            if last_plain is not None and last_profile is not None:
                tally.turns += 1
                tally.warm_plain += head_plain.startswith(last_plain[1])
                tally.warm_profile += full_profile.startswith(last_profile[1])
                tally.same_system_plain += system_plain == last_plain[0]
                tally.same_system_profile += system_profile == last_profile[0]
                if first_of_session:
                    tally.boundaries += 1
                    tally.boundary_system_profile += system_profile == last_profile[0]
                else:
                    tally.warm_within_profile += full_profile.startswith(last_profile[1])
            last_plain, last_profile = (system_plain, head_plain), (system_profile, head_profile)
            first_of_session = False
            if keys:  # recall@8 of questions asked of a non-empty memory
                ranked = realmem.ranked_keys([s.fact.id for s in plain.facts], keys)
                tally.recall.append(metrics.recall_at(ranked, gold))
                shown = [*profile.fact_ids, *(s.fact.id for s in rest.facts)]
                tally.profile_recall.append(covered(shown, keys, gold))
                tally.equal_budget.append(covered([s.fact.id for s in wide.facts], keys, gold))
                tally.profile_sizes.append(len(profile.fact_ids))
                tally.profile_versions.add(f"{name}:{profile.version}")
        if session.memories:
            records = [realmem.fact_record(content, session.at) for content in session.memories]
            ids = memory.add_facts(records, dataset=scope.dataset, project=scope.project)
            keys.update(zip(ids, session.memories, strict=True))
    tally.seconds += time.perf_counter() - started


def share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "-"


def run(memory: Memory, *, max_facts: int, max_personas: int | None, max_questions: int | None) -> str:
    if not realmem.available():
        return f"### profile: skipped, no data at {realmem.DATA} (the dev personas are read there at run time)\n"
    chosen = realmem.personas()[:max_personas]
    tally = Tally()
    for path in chosen:
        replay(memory, path, max_facts=max_facts, max_questions=max_questions, tally=tally)
    names = ", ".join(p.name.split("_dialogues")[0] for p in chosen)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    layouts = [
        ["recall block in the system prompt", share(tally.warm_plain, tally.turns)],
        [f"profile (max {max_facts}) in the system prompt, recall after the conversation"],
    ]
    layouts[0].append(share(tally.same_system_plain, tally.turns))
    layouts[1] += [share(tally.warm_profile, tally.turns), share(tally.same_system_profile, tally.turns)]
    lines = [
        f"### profile: {len(chosen)} personas ({names}), {tally.turns} turns after the first, {stamp}, "
        f"{tally.seconds:.0f} s\n",
        markdown_table(
            ["prompt layout", "warm turns (previous prompt a byte prefix)", "system prompt unchanged"], layouts
        ),
        "",
        f"At the {tally.boundaries} session boundaries (a new conversation: only the system prompt can be reused) "
        f"the profile's system prompt was unchanged on {share(tally.boundary_system_profile, tally.boundaries)}; "
        f"{len(tally.profile_versions)} distinct profile texts over the replay. Within a session, the profile "
        f"layout's turns were warm on {share(tally.warm_within_profile, tally.turns - tally.boundaries)}.\n",
    ]
    if tally.recall:
        size = statistics.fmean(tally.profile_sizes)
        rows = [
            [f"recall alone ({metrics.K})", f"{statistics.fmean(tally.recall):.3f}", len(tally.recall)],
            [
                f"profile ({size:.1f} on average) + recall({metrics.K}, profile excluded)",
                f"{statistics.fmean(tally.profile_recall):.3f}",
                len(tally.profile_recall),
            ],
            [
                f"recall alone ({metrics.K} + the profile's size)",
                f"{statistics.fmean(tally.equal_budget):.3f}",
                len(tally.equal_budget),
            ],
        ]
        lines += [
            markdown_table(["facts shown", "recall@8 (gold points among the facts shown)", "questions"], rows),
            "",
        ]
    return "\n".join(lines) + "\n"
