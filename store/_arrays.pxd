# Columns held in `array.array`s (`store.staged`), taken in C with their type checked: cheaper
# per call than a typed memoryview. Shared by the compiled modules that read staged sends.
from cpython cimport array


cdef inline array.array ints(object column):
    """`column`, an array of C ints ('i'), or TypeError."""
    cdef array.array out = column
    if out.ob_descr.typecode != b"i":
        raise TypeError("a column of ints ('i') was expected")
    return out


cdef inline array.array longs(object column):
    """`column`, an array of C long longs ('q'), or TypeError."""
    cdef array.array out = column
    if out.ob_descr.typecode != b"q":
        raise TypeError("a column of long longs ('q') was expected")
    return out
