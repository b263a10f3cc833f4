"""rmqpy broker package (arrives with its issue)."""
