# A `MappedFileQueue`'s end, taken in C from its `files` list; shared by the compiled modules
# that ask a queue (commitlog or consume queue) where it ends.


cdef inline long long files_end(list files) except -1:
    """`MappedFileQueue.max_offset()` over its `files`: one past the last byte written, 0 for
    a queue with no file."""
    if not files:
        return 0
    last = files[len(files) - 1]  # (wraparound is off in the modules that use it)
    return <long long>last.file_from_offset + <long long>last.wrote_position
