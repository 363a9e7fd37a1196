"""The cores this process may use: its CPU affinity, and its cgroup's CPU quota.

A container is given cores in one of two ways: a set of CPUs (`docker --cpuset-cpus`,
taskset), which the affinity shows, or a share of time on all of them (`docker --cpus 2`, a
Kubernetes CPU limit), which only the cgroup's quota shows: os.cpu_count() and the affinity
still count every core of the machine, 64 on a 64-core node whose container may use 2. The
quota is read from cgroup v2's cpu.max or v1's cpu.cfs_quota_us, in the process's cgroup and
its ancestors (the tightest counts), rounded up to whole cores. Python 3.13's
os.process_cpu_count() reads only the affinity; no library npbert depends on reads either.
"""

import functools
import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def cpus(cgroup_root: Path = CGROUP, membership: Path = Path("/proc/self/cgroup")) -> int:
    """Cores this process may run on: the affinity (Linux), at most its cgroup's quota."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root, membership)
    return max(1, min(cores, quota)) if quota else cores


@functools.cache  # read once a process: every embed() call asks, and the files are slow
def cgroup_quota(root: Path, membership: Path) -> int | None:
    """The tightest CPU quota over the process's cgroups, in whole cores, or None (none set,
    or no cgroup file system)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:  # "0::/path" (v2); "4:cpu,cpuacct:/path" (v1)
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":
            quotas += _quotas(root, path, "cpu.max", _v2_quota)
        elif "cpu" in controllers.split(","):  # mounted as "cpu,cpuacct", with "cpu" linked
            for mount in {root / controllers, root / "cpu"}:
                quotas += _quotas(mount, path, "cpu.cfs_quota_us", _v1_quota)
    return min(quotas, default=None)


def _quotas(mount: Path, path: str, name: str, parse) -> list[int]:
    """The quotas set in the cgroup at `path` under `mount` and in its ancestors. Inside a
    container's cgroup namespace the path is "/", its own cgroup at the mount's root."""
    found, directory = [], mount / path.lstrip("/")
    for folder in (directory, *directory.parents):
        if not folder.is_relative_to(mount):
            break
        try:
            quota = parse(folder / name)
        except (OSError, ValueError):  # no such file here, or one npbert cannot read
            continue
        found += [quota] if quota else []
    return found


def _v2_quota(path: Path) -> int | None:
    """cpu.max: "QUOTA PERIOD" in microseconds, or "max PERIOD" for none."""
    quota, period = path.read_text().split()
    return None if quota == "max" else math.ceil(int(quota) / int(period))


def _v1_quota(path: Path) -> int | None:
    """cpu.cfs_quota_us (-1 for none) over cpu.cfs_period_us beside it."""
    quota = int(path.read_text())
    period = int((path.parent / "cpu.cfs_period_us").read_text())
    return None if quota < 0 else math.ceil(quota / period)
