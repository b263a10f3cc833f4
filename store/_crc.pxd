# zlib-ng's own `zng_crc32`, which `zlib_ng.crc32` calls, taken from that extension already
# loaded: the compiled modules sum a record's body where it lies, with no slice and no call
# through Python. Each module keeps the pointer `native_crc32` returns (NULL where the
# extension does not export it or sums otherwise: then `zlib_ng.crc32` does the work).
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint32_t


cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char* path, int flags)
    void* dlsym(void* handle, const char* name)
    int RTLD_NOW, RTLD_NOLOAD

ctypedef uint32_t (*Crc32)(uint32_t crc, const unsigned char* data, uint32_t size) noexcept nogil


cdef inline Crc32 native_crc32(object zlib_ng_module):
    """`zng_crc32` of the loaded `zlib_ng.zlib_ng` module, checked against its `crc32`."""
    cdef void* handle = dlopen(zlib_ng_module.__file__.encode(), RTLD_NOW | RTLD_NOLOAD)
    if handle == NULL:
        return NULL
    cdef Crc32 found = <Crc32>dlsym(handle, b"zng_crc32")
    cdef bytes probe = bytes(range(256)) * 5
    if found == NULL or found(0, <const unsigned char*>PyBytes_AS_STRING(probe),
                              <uint32_t>PyBytes_GET_SIZE(probe)) != zlib_ng_module.crc32(probe):
        return NULL
    return found
