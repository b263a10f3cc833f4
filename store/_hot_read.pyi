from rmqpy.store.hot_read import reference_gather as gather
from rmqpy.store.hot_read import reference_read_hot as read_hot

__all__ = ["gather", "read_hot"]
