"""RocketMQ remoting: a sans-I/O frame codec (`frame`, `command`, `header_codec`, `headers`)
and, on top of it, the asyncio transport."""
