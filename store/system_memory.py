"""How much memory the store may count on: the machine's, or its cgroup's limit when lower.

A JVM reads the container's limit (JDK 10+), so a Java broker in a container sizes what it
treats as hot data (`accessMessageInMemoryMaxRatio` of memory) by that limit, not by the
host's RAM. This does the same for cgroup v2 (`memory.max`) and v1
(`memory.limit_in_bytes`), from the cgroup `/proc/self/cgroup` names.
"""

from __future__ import annotations

import os
from pathlib import Path


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def usable_memory(
    proc_cgroup: str = "/proc/self/cgroup", cgroup_root: str = "/sys/fs/cgroup"
) -> int:
    """The lowest of the machine's memory and the memory limits of this process's cgroup."""
    limits = [physical_memory()]
    try:
        lines = Path(proc_cgroup).read_text(encoding="utf-8").splitlines()
    except OSError:
        return limits[0]
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            limit_file = Path(cgroup_root, path.lstrip("/"), "memory.max")
        elif "memory" in controllers.split(","):
            limit_file = Path(cgroup_root, "memory", path.lstrip("/"), "memory.limit_in_bytes")
        else:
            continue
        try:
            text = limit_file.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text.isdigit():  # v2 says "max" when there is no limit
            limits.append(int(text))
    return min(limits)
