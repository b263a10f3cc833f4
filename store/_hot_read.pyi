from rmqpy.store.hot_read import reference_gather as gather

__all__ = ["gather"]
