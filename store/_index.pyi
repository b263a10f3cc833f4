from rmqpy.store.index_file import IndexFile, IndexService

def put_index_keys(
    f: IndexFile, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
) -> int: ...
def build_round(
    service: IndexService, topics: list[str], keys: list[str], phys: list[int], stamps: list[int]
) -> bool: ...
