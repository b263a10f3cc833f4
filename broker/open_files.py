"""How close the broker is to its open-files limit. Every consume-queue file, commitlog and
index file and connection holds descriptors; one that runs out acknowledges a send whose
dispatch then fails, and drops connections as they open. So a reserve is kept: once fewer
than `reserve_for(limit)` descriptors are left, new topics and new connections are refused
with a clear error, `/healthz` answers 503, and what exists goes on being served.
"""

from __future__ import annotations

import errno
import os
import resource

import structlog

log = structlog.get_logger(__name__)

FD_DIR = "/proc/self/fd"
MIN_RESERVE = 32
MAX_RESERVE = 1024
SAMPLE_INTERVAL_S = 1.0
OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


def reserve_for(limit: int) -> int:
    """Descriptors kept back: a twentieth of the limit, between 32 and 1024."""
    return min(max(limit // 20, MIN_RESERVE), MAX_RESERVE)


class OpenFiles:
    """Samples the descriptors in use against the soft limit (`sample`, every second and
    before a topic is created); `low` is True while they are inside the reserve."""

    def __init__(self, fd_dir: str = FD_DIR) -> None:
        self.fd_dir = fd_dir
        self.in_use = 0
        self.limit = resource.RLIM_INFINITY
        self.low = False

    def sample(self) -> bool:
        """Count again; returns `low`. Where descriptors cannot be counted (no /proc), never
        low; where listing them fails for want of one, low."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        try:
            in_use = len(os.listdir(self.fd_dir))
        except OSError as exc:
            if exc.errno not in OUT_OF_FILES:
                return False
            in_use = limit
        self.limit, self.in_use = limit, in_use
        low = limit != resource.RLIM_INFINITY and limit - in_use < reserve_for(limit)
        if low != self.low:
            self.low = low
            if low:
                log.error("open files nearly exhausted: new topics and connections are refused "
                          "until descriptors are freed or the limit is raised",
                          in_use=in_use, limit=limit, reserve=reserve_for(limit))  # fmt: skip
            else:
                log.warning("open files back within the limit", in_use=in_use, limit=limit)
        return low

    def problem(self) -> str | None:
        """Why new files may not be opened now, or None."""
        if not self.low:
            return None
        return (
            f"open files nearly exhausted: {self.in_use} of the limit {self.limit} in use, "
            f"{reserve_for(self.limit)} kept in reserve; raise the limit (ulimit -n, "
            "LimitNOFILE= in systemd, nofile in Docker)"
        )

    def room_for_new_files(self) -> str | None:
        """Sampled now: why a new topic (new queue files) must be refused, or None."""
        self.sample()
        return self.problem()
