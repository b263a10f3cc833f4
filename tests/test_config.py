"""broker.conf, environment and flag overrides become a typed MessageStoreConfig."""

from __future__ import annotations

import pytest

from config.properties import ConfigError, load_config
from config.store_config import FlushDiskType, MessageStoreConfig

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
