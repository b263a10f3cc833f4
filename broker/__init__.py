"""The rmqpy broker: the daemon, its request processors, routes, offsets and metrics."""
