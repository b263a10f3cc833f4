"""rmqpy's web console: cluster, topics, groups, messages and live charts, through the name
server as RocketMQ Dashboard works (`rmqpy console`)."""
