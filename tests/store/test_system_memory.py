"""The memory the store sizes its hot data by: the machine's, or a lower cgroup limit, read
from files laid out as cgroup v2 and v1 lay them out."""

from __future__ import annotations

from pathlib import Path

from rmqpy.store.system_memory import physical_memory, usable_memory

GiB = 1024**3


def cgroup(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[str, str]:
    proc = tmp_path / "cgroup"
    proc.write_text(membership)
    root = tmp_path / "sys-fs-cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return str(proc), str(root)


def test_a_cgroup_v2_limit_below_the_machines_memory_is_what_counts(tmp_path: Path) -> None:
    proc, root = cgroup(tmp_path, "0::/docker/abc\n", {"docker/abc/memory.max": f"{GiB}\n"})
    assert usable_memory(proc, root) == min(GiB, physical_memory())


def test_no_limit_leaves_the_machines_memory(tmp_path: Path) -> None:
    proc, root = cgroup(tmp_path, "0::/\n", {"memory.max": "max\n"})
    assert usable_memory(proc, root) == physical_memory()
    assert usable_memory(str(tmp_path / "missing"), root) == physical_memory()


def test_a_cgroup_v1_memory_limit_counts(tmp_path: Path) -> None:
    proc, root = cgroup(
        tmp_path,
        "12:cpu,cpuacct:/k8s/pod\n9:memory:/k8s/pod\n1:name=systemd:/\n",
        {"memory/k8s/pod/memory.limit_in_bytes": str(512 * 1024**2)},
    )
    assert usable_memory(proc, root) == min(512 * 1024**2, physical_memory())
