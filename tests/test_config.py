"""broker.conf, environment and flag overrides become a typed MessageStoreConfig."""

from __future__ import annotations

import pytest

from rmqpy.config.broker_config import BrokerRole, load_settings
from rmqpy.config.properties import ConfigError, load_config
from rmqpy.config.reference import broker_conf
from rmqpy.config.store_config import FlushDiskType, MessageStoreConfig

BROKER_CONF = """
# RocketMQ-style keys
brokerClusterName = DefaultCluster
flushDiskType=SYNC_FLUSH
mappedFileSizeCommitLog=65536
checkCRCOnRecover=false
deleteWhen=03;15
"""


def test_broker_conf_then_env_then_flags() -> None:
    config, unknown = load_config(
        MessageStoreConfig,
        BROKER_CONF,
        environ={"RMQPY_MAX_MESSAGE_SIZE": "1024", "RMQPY_DELETE_WHEN": "05"},
        overrides={"deleteWhen": "06"},
    )
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.mapped_file_size_commitlog == 65536
    assert config.check_crc_on_recover is False
    assert config.max_message_size == 1024
    assert config.delete_when == "06"
    assert unknown == {"brokerClusterName": "DefaultCluster"}


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("maxMessageSize=big", "maxMessageSize"),
        ("flushDiskType=SOMETIMES", "flushDiskType"),
        ("checkCRCOnRecover=yes", "checkCRCOnRecover"),
    ],
)
def test_bad_values_name_the_setting(conf: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(MessageStoreConfig, conf, environ={})


def test_invalid_combinations_are_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 20"):
        load_config(MessageStoreConfig, "mappedFileSizeConsumeQueue=1001", environ={})
    with pytest.raises(ValueError, match="deleteWhen"):
        load_config(MessageStoreConfig, "deleteWhen=25", environ={})
    with pytest.raises(ValueError, match="commitLogWritebackKB"):
        load_config(MessageStoreConfig, "commitLogWritebackKB=-1", environ={})


def test_one_broker_conf_feeds_every_component() -> None:
    conf = "brokerName=b1\nlistenPort=20911\nflushDiskType=SYNC_FLUSH\nbrokerRole=SYNC_MASTER\n"
    conf += "serverChannelMaxIdleTimeSeconds=60\nbrokerHeartbeatTimeoutMillis=5000\nlegacyKey=1\n"
    settings, unknown = load_settings(
        conf, environ={"RMQPY_BROKER_ID": "0"}, overrides={"listenPort": "0"}
    )
    assert settings.broker.broker_name == "b1"
    assert settings.broker.listen_port == 0
    assert settings.broker.broker_role is BrokerRole.SYNC_MASTER
    assert settings.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert settings.remoting.server_channel_max_idle_time_seconds == 60
    assert settings.namesrv.broker_heartbeat_timeout_ms == 5000
    assert unknown == {"legacyKey": "1"}


def test_settings_errors_name_the_key_and_allowed_values() -> None:
    with pytest.raises(
        ConfigError, match="brokerRole: 'LEADER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"
    ):
        load_settings("brokerRole=LEADER", environ={})
    with pytest.raises(ConfigError, match="unknown setting nope"):
        load_settings("", environ={}, overrides={"nope": "1"})
    with pytest.raises(ConfigError, match="defaultTopicQueueNums"):
        load_settings("defaultTopicQueueNums=0", environ={})


def test_retention_takes_hours_with_fractions_and_prints_back_as_java_reads_it() -> None:
    settings, _ = load_settings("fileReservedTime=0.05", environ={})
    assert settings.store.file_reserved_time_hours == 0.05  # three minutes
    assert "fileReservedTime=0.05\n" in broker_conf(settings)
    default, _ = load_settings("fileReservedTime=48", environ={})
    assert "fileReservedTime=48\n" in broker_conf(default)  # an int, as Java's setting is
