"""rmqpy: a persistent message broker that speaks Apache RocketMQ's remoting protocol and writes
its store files byte for byte.

Everything installs under this one name: the SDK (`rmqpy.client`), the broker
(`rmqpy.broker`), the store (`rmqpy.store`), the protocol codec (`rmqpy.remoting`), settings
(`rmqpy.config`), the `rmqpy` command (`rmqpy.cli`), the web console (`rmqpy.console`), the
benchmarks (`rmqpy.bench`) and the Spark sources (`rmqpy.pipeline`)."""
