"""A server's processes under a CPU cap (a Linux cgroup's CPU quota), as if it ran on a machine of
its own: on one shared machine, two servers otherwise take CPU from each other and from their
clients, so a second server cannot show what it adds (`bench replicas`).

Both cgroup versions: v2 (`cpu.max` in a group under /sys/fs/cgroup) and v1 (`cpu.cfs_quota_us`
under /sys/fs/cgroup/cpu). Changing groups needs root; `cap_reason` says why capping is not
possible here, and the bench leaves its capped rows out with that reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

PERIOD_US = 100_000
"""The quota's period: the kernel's default CFS period."""


@dataclass(frozen=True)
class Hierarchy:
    """Where CPU groups are made: the root of the cpu controller, and which cgroup version it is."""

    root: Path
    version: int

    def quota_lines(self, cpus: float) -> dict[str, str]:
        """The files and values that give a group `cpus` CPUs (a quota of cpus * period per period)."""
        quota = max(1_000, round(cpus * PERIOD_US))
        if self.version == 2:
            return {"cpu.max": f"{quota} {PERIOD_US}"}
        return {"cpu.cfs_period_us": str(PERIOD_US), "cpu.cfs_quota_us": str(quota)}


def hierarchy() -> Hierarchy | None:
    """The writable cpu controller of this machine, or None."""
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split() and os.access(v2, os.W_OK):
        return Hierarchy(v2, 2)
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        return Hierarchy(v1, 1)
    return None


def cap_reason() -> str | None:
    """Why servers cannot be capped here (not Linux, no writable cpu controller), or None."""
    if not Path("/proc/self/stat").exists():
        return "no /proc: CPU caps need Linux"
    if hierarchy() is None:
        return "no writable cgroup cpu controller (CPU caps need root, cgroup v1 or v2)"
    return None


def postmaster_pid(dsn: str) -> int:
    """The postmaster of the local server at `dsn`: the parent of a backend it starts, read while
    that backend lives (it ends with its connection)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        postmaster = _parent(int(row[0])) if row is not None else 0
    if not postmaster:
        raise RuntimeError(f"no local postmaster found for {dsn!r}: CPU caps need the server on this machine")
    return postmaster


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and every process it started (its backends and auxiliary processes)."""
    children = [pid for pid in _pids() if _parent(pid) == postmaster]
    return [postmaster, *children]


@contextmanager
def capped(name: str, postmaster: int, cpus: float) -> Iterator[None]:
    """The server whose postmaster is `postmaster`, every process of it, in a group of its own with
    `cpus` CPUs while the block runs (the processes it starts meanwhile inherit the group); back in
    the group they came from, and the group removed, however it ends."""
    tree = hierarchy()
    if tree is None:
        raise RuntimeError(cap_reason() or "no cpu controller")
    origin = _group_of(postmaster, tree)
    group = tree.root / name
    group.mkdir(exist_ok=True)
    if tree.version == 2:
        _enable_cpu(tree.root)
    for file, value in tree.quota_lines(cpus).items():
        (group / file).write_text(value)
    try:
        _move(server_pids(postmaster), group)
        yield
    finally:
        _move(_members(group), origin)
        group.rmdir()


def _enable_cpu(root: Path) -> None:
    control = root / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


def _group_of(pid: int, tree: Hierarchy) -> Path:
    """The group `pid` is in, in `tree`'s hierarchy (from /proc/<pid>/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if (tree.version == 2 and number == "0") or (tree.version == 1 and "cpu" in controllers.split(",")):
            return tree.root / path.lstrip("/")
    return tree.root


def _move(pids: list[int], group: Path) -> None:
    for pid in pids:
        try:
            (group / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:
            continue  # it ended meanwhile (a backend whose client left)


def _members(group: Path) -> list[int]:
    return [int(line) for line in (group / "cgroup.procs").read_text().split()]


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _parent(pid: int) -> int:
    """The parent of `pid` (/proc/<pid>/stat; its command may hold spaces, so read after the last ')'),
    or 0 once it has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])
