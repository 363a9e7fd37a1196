"""The cores a process may use: its affinity and its cgroup's CPU quota (npbert.layer.cores)."""

import os
from pathlib import Path

import pytest

from npbert.layer import cores


def cgroup_tree(root: Path, files: dict[str, str]) -> Path:
    """A cgroup file system under `root`: {relative path: content}."""
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


POD_C1 = "kubepods/pod1/c1/cpu.max"
V1 = "cpu,cpuacct/docker/x/cpu.cfs_"


@pytest.mark.parametrize(
    ("membership", "files", "quota"),
    [
        # cgroup v2, in a container's namespace: its own cgroup is the root
        ("0::/\n", {"cpu.max": "200000 100000\n"}, 2),
        ("0::/\n", {"cpu.max": "150000 100000\n"}, 2),  # 1.5 cores: rounded up
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),
        # v2 seen from the host: the limit on an ancestor counts, the tightest wins
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/cpu.max": "300000 100000", POD_C1: "max 1"}, 3),
        ("0::/a/b\n", {"a/cpu.max": "100000 100000", "a/b/cpu.max": "400000 100000"}, 1),
        # v1, cpu and cpuacct mounted together or apart
        ("4:cpu,cpuacct:/docker/x\n", {f"{V1}quota_us": "250000", f"{V1}period_us": "100000"}, 3),
        ("4:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
        ("0::/\n", {}, None),  # no cpu controller files
        ("0::/\n", {"cpu.max": "garbage"}, None),
        ("", {}, None),
        ("not a cgroup line\n0::/\n", {"cpu.max": "100000 100000"}, 1),
    ],
)
def test_the_cgroup_quota_in_whole_cores(tmp_path, membership, files, quota):
    root = cgroup_tree(tmp_path / "cgroup", files)
    (tmp_path / "self").write_text(membership)
    assert cores.cgroup_quota(root, tmp_path / "self") == quota


def test_cores_are_the_affinity_at_most_the_quota(tmp_path, monkeypatch):
    # docker --cpus 2 on a machine of many cores: the affinity counts them all
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    root = cgroup_tree(tmp_path / "cgroup", {"cpu.max": "200000 100000"})
    (tmp_path / "self").write_text("0::/\n")
    assert cores.cpus(root, tmp_path / "self") == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert cores.cpus(root, tmp_path / "self") == 1  # taskset -c 0
    assert cores.cpus(root, tmp_path / "no-such-file") == 1


def test_a_tiny_quota_still_gives_one_core(tmp_path):
    root = cgroup_tree(tmp_path / "cgroup", {"cpu.max": "1000 100000"})  # 0.01 of a core
    (tmp_path / "self").write_text("0::/\n")
    assert cores.cpus(root, tmp_path / "self") == 1


def test_the_quota_is_read_once_a_process(tmp_path):
    # every embed() call asks for the cores: four file reads a call cost more than a short call
    root = cgroup_tree(tmp_path / "cgroup", {"cpu.max": "100000 100000"})
    (tmp_path / "self").write_text("0::/\n")
    assert cores.cgroup_quota(root, tmp_path / "self") == 1
    (root / "cpu.max").unlink()
    assert cores.cgroup_quota(root, tmp_path / "self") == 1
