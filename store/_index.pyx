# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of `store.index_file.put_index_keys`: each `topic#key` hashed as Java's
String.hashCode in C (over UTF-16 code units; a key beyond the BMP is hashed by the
reference) and added to the file as `IndexFile.put_few` adds it, straight into its mapping,
the header written after them; and `build_round`, a dispatch round's
`IndexService.build_index` in one call where it only adds keys to the last file. The header,
slot and entry layouts are `store.layout`'s, checked at import."""

from cpython.unicode cimport PyUnicode_READ_CHAR
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from rmqpy.store._big_endian cimport get32, put32, put64

from rmqpy.store.layout import INDEX_ENTRY, INDEX_HEADER, INDEX_SLOT

if (INDEX_HEADER.format, INDEX_SLOT.format, INDEX_ENTRY.format) != (">qqqqii", ">i", ">iqii"):
    raise ImportError("store._index does not match store.layout")

cdef enum:
    HEADER_SIZE = 40
    SLOT_SIZE = 4
    ENTRY_SIZE = 20
cdef int64_t INT_MAX = 0x7FFFFFFF
cdef Py_UCS4 JOINT = ord("#")


cdef bint _hash_into(str text, uint32_t* h) noexcept:
    """Run Java's hash over `text`; False for a character outside the BMP (two UTF-16
    units, left to the reference)."""
    cdef Py_ssize_t i, n = len(text)
    cdef Py_UCS4 c
    for i in range(n):
        c = PyUnicode_READ_CHAR(text, i)
        if c > 0xFFFF:
            return False
        h[0] = h[0] * 31 + <uint32_t>c
    return True


cdef int64_t _key_hash(str topic, str key, reference) except -1:
    """`index_key_hash(topic + "#" + key)`."""
    cdef uint32_t h = 0
    cdef int32_t signed
    if not _hash_into(topic, &h):
        return reference(f"{topic}#{key}")
    h = h * 31 + <uint32_t>JOINT
    if not _hash_into(key, &h):
        return reference(f"{topic}#{key}")
    signed = <int32_t>h
    if signed == -2147483648:
        return 0
    return -<int64_t>signed if signed < 0 else signed


cdef object _reference_hash = None  # `index_file.index_key_hash` (imported at first use)


def put_index_keys(f, list topics, list keys, list phys, list stamps):
    """`store.index_file.put_index_keys(f, topics, keys, phys, stamps)`."""
    return _put_keys(f, topics, keys, phys, stamps)


def build_round(service, list topics, list keys, list phys, list stamps):
    """`service.build_index(topics, keys, phys, stamps)` (an `IndexService`) where it adds
    every key to the last file, past what that file indexed, into blocks it reserved: the
    same entries, slots and header; False, having changed nothing, for anything else (no
    file, not all fit, some indexed before, blocks to reserve first), which the reference
    does."""
    cdef list files = service.files
    cdef Py_ssize_t n = len(keys)
    if not files or n == 0:
        return n == 0
    f = files[len(files) - 1]
    cdef int64_t count = f.index_count
    if (count + n > <int64_t>f.index_num
            or <int64_t>phys[0] < <int64_t>f.end_phy_offset
            or <int64_t>f._entries_at + (count + n) * ENTRY_SIZE > <int64_t>f.blocks.reserved):
        return False
    _put_keys(f, topics, keys, phys, stamps)
    service.error = None
    return True


cdef Py_ssize_t _put_keys(f, list topics, list keys, list phys, list stamps) except -1:
    global _reference_hash
    if _reference_hash is None:
        from rmqpy.store.index_file import index_key_hash
        _reference_hash = index_key_hash
    cdef Py_ssize_t k = min(f.index_num - f.index_count, len(keys))
    if k <= 0:
        return 0
    cdef int64_t[4] state = [f.index_count, f.hash_slot_count, f.begin_timestamp,
                             f.begin_phy_offset]
    cdef unsigned char[::1] mm = f._mm
    _put(mm, f.hash_slot_num, f._entries_at, k, topics, keys, phys, stamps, state,
         _reference_hash)
    f.index_count, f.hash_slot_count, f.begin_timestamp, f.begin_phy_offset = state
    f.end_phy_offset = end_phy = phys[k - 1]
    f.end_timestamp = end_stamp = stamps[k - 1]
    cdef unsigned char* header = &mm[0]  # (`IndexFile.write_header`)
    put64(header, <uint64_t>state[2])
    put64(header + 8, <uint64_t><int64_t>end_stamp)
    put64(header + 16, <uint64_t>state[3])
    put64(header + 24, <uint64_t><int64_t>end_phy)
    put32(header + 32, <uint32_t>state[1])
    put32(header + 36, <uint32_t>state[0])
    return k


cdef int _put(unsigned char[::1] mm, int64_t slot_num, int64_t entries_at, Py_ssize_t k,
              list topics, list keys, list phys, list stamps, int64_t* state,
              reference) except -1:
    """The loop of `put_index_keys` over the file's mapping (`state`: indexCount,
    hashSlotCount, beginTimestamp, beginPhyOffset, carried in and out). The view of the
    mapping ends with this call."""
    cdef unsigned char* base = &mm[0]
    cdef unsigned char* at
    cdef int64_t n = state[0], hash_slot_count = state[1]
    cdef int64_t begin = state[2], begin_phy = state[3]
    cdef int64_t key_hash, phy, stamp, diff, slot_pos
    cdef int32_t prev
    cdef Py_ssize_t i
    for i in range(k):
        key_hash = _key_hash(topics[i], keys[i], reference)
        phy = phys[i]
        stamp = stamps[i]
        slot_pos = HEADER_SIZE + (key_hash % slot_num) * SLOT_SIZE
        prev = get32(base + slot_pos)
        if prev <= 0 or prev > n:
            prev = 0
            hash_slot_count += 1
        diff = 0
        if begin > 0 and stamp > begin:
            diff = (stamp - begin) // 1000
            if diff > INT_MAX:
                diff = INT_MAX
        if n <= 1:  # the first entry of a file sets its begin time
            begin, begin_phy = stamp, phy
        at = base + entries_at + n * ENTRY_SIZE
        put32(at, <uint32_t>key_hash)
        put64(at + 4, <uint64_t>phy)
        put32(at + 12, <uint32_t>diff)
        put32(at + 16, <uint32_t>prev)
        put32(base + slot_pos, <uint32_t>n)
        n += 1
    state[0], state[1], state[2], state[3] = n, hash_slot_count, begin, begin_phy
    return 0
