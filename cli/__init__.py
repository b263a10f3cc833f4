"""The `rmqpy` command: the broker and name-server daemons, the client commands, the web
console, `store dump` and `bench`. It uses the SDK (client/), the broker and the store; the SDK
imports none of it."""
