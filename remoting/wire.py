"""Every byte layout and limit of the remoting frame, defined once.

Frame::

    i32 totalLen = 4 + headerLen + bodyLen        (does not count itself)
    i32 typeAndLen = serializeType << 24 | headerLen
    header (headerLen bytes) | body (the rest)

ROCKETMQ binary header (serialize type 1)::

    i16 code | i8 language | i16 version | i32 opaque | i32 flag
    | i32 remarkLen, remark | i32 extLen, { i16 keyLen, key, i32 valueLen, value }*
"""

from __future__ import annotations

import struct

# Java's `NettyDecoder`: `com.rocketmq.remoting.frameMaxLength`, default 16777216.
MAX_FRAME_LENGTH = 16 * 1024 * 1024
# typeAndLen keeps the header length in its low 24 bits.
MAX_HEADER_LENGTH = (1 << 24) - 1

FRAME_PREFIX = struct.Struct(">ii")  # totalLen, typeAndLen
assert FRAME_PREFIX.size == 8
FRAME_LENGTH = struct.Struct(">i")
TYPE_AND_LENGTH_SIZE = 4

BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
assert BINARY_FIXED.size == 13
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
INT_VALUES = range(-(2**31), 2**31)  # what Java's int holds (I32 fields, Integer headers)
LONG_VALUES = range(-(2**63), 2**63)  # and its long

RPC_RESPONSE = 0x1  # flag bit 0
RPC_ONEWAY = 0x2  # flag bit 1
