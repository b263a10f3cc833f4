"""rmqpy remoting package (arrives with its issue)."""
