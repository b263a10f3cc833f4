"""RocketMQ-compatible store."""
