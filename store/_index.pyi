from rmqpy.store.index_file import IndexFile

def put_index_keys(
    f: IndexFile, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
) -> int: ...
