"""Where the records of a commitlog file are, and where its readable part ends.

`scan` walks TOTALSIZE from record to record (the one step that cannot be vectorised: each
record's start depends on the one before), checking magic and size as it goes, and stops at
the end of the written data (zeros, or the BLANK filler that closes a full file), at `end`, or
at the first record that is damaged or torn; `Scan.damage` then says where and why. With
`check_crc` each record is validated whole, CRC included, by the store's own `check_record`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rmqpy.config.compiled import twin
from rmqpy.store.layout import BLANK, BLANK_MAGIC, MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2, RECORD_HEAD
from rmqpy.store.message import RecordError, check_record


@dataclass(frozen=True, slots=True)
class Damage:
    position: int  # byte offset within the file
    reason: str


@dataclass(frozen=True, slots=True)
class Scan:
    positions: npt.NDArray[np.int64]  # where each whole record starts, within the file
    damage: Damage | None  # what stopped the walk early, if anything did


def scan(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    check_crc: bool = False,
) -> Scan:
    """Record starts from `start` up to (not including) `end`, which must be a record
    boundary or the file's end."""
    stop = len(buf) if end is None else min(end, len(buf))
    positions: list[int] = []
    pos = start
    damage: Damage | None = None
    magics = (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2)
    unpack = BLANK.unpack_from  # TOTALSIZE and MAGIC, the head every record and filler has
    append = positions.append
    size, smallest = len(buf), RECORD_HEAD.size
    fast = not check_crc
    while pos + BLANK.size <= stop:
        total, magic = unpack(buf, pos)
        if fast and magic in magics and smallest < total <= size - pos:  # a sane record
            append(pos)
            pos += total
            continue
        if magic == BLANK_MAGIC or (total == 0 and magic == 0):
            break
        if check_crc:
            try:
                check_record(buf, pos, True, len(buf))
            except RecordError as exc:
                damage = Damage(pos, str(exc))
                break
        elif magic not in magics:
            damage = Damage(pos, f"bad magic {magic & 0xFFFFFFFF:#010x} at {pos}")
            break
        elif total <= RECORD_HEAD.size or pos + total > len(buf):
            damage = Damage(pos, f"bad total size {total} at {pos}")
            break
        positions.append(pos)
        pos += total
    return Scan(np.array(positions, dtype=np.int64), damage)


# The walk above, kept as the reference the compiled twin is tested against; the twin
# declines the walks it does not take (damage on the way, CRCs to check) and the reference
# walks those.
reference_scan = scan
_compiled = twin("rmqpy.pipeline._commitlog_scan")
if _compiled is not None:
    _compiled_walk = _compiled.scan

    def scan(
        buf: bytes | bytearray | memoryview,
        start: int = 0,
        end: int | None = None,
        check_crc: bool = False,
    ) -> Scan:
        if not check_crc:
            stop = len(buf) if end is None else min(end, len(buf))
            positions = _compiled_walk(buf, start, stop)
            if positions is not None:
                return Scan(positions, None)
        return reference_scan(buf, start, end, check_crc)
