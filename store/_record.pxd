# A commitlog record laid out in C, up to and including its body (RocketMQ's v1 layout, as
# `store.layout.RECORD_FIXED` describes it: the modules that cimport this check their layout
# against it at import). Shared by the record encoder and the send lane's staging.
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy

from rmqpy.store._big_endian cimport put32, put64


cdef inline unsigned char* put_record_head(
    unsigned char* at, uint32_t total, uint32_t magic, uint32_t body_crc, uint32_t queue_id,
    uint32_t flag, uint64_t queue_offset, uint64_t phy, uint32_t sys_flag, uint64_t born_ts,
    bytes born_ip, uint32_t born_port, uint64_t store_ts, bytes store_ip, uint32_t store_port,
    uint32_t reconsume_times, uint64_t prepared_transaction_offset, const char* body,
    Py_ssize_t body_len,
) noexcept:
    """TOTALSIZE to BODY (`body_len` bytes at `body`) at `at`; returns where TOPICLEN goes."""
    at = put32(at, total)
    at = put32(at, magic)
    at = put32(at, body_crc)
    at = put32(at, queue_id)
    at = put32(at, flag)
    at = put64(at, queue_offset)
    at = put64(at, phy)
    at = put32(at, sys_flag)
    at = put64(at, born_ts)
    memcpy(at, <const char*>born_ip, len(born_ip))
    at = put32(at + len(born_ip), born_port)
    at = put64(at, store_ts)
    memcpy(at, <const char*>store_ip, len(store_ip))
    at = put32(at + len(store_ip), store_port)
    at = put32(at, reconsume_times)
    at = put64(at, prepared_transaction_offset)
    at = put32(at, <uint32_t>body_len)
    memcpy(at, body, body_len)
    return at + body_len
