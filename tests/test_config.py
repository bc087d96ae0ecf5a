import pytest

from shmq.config import BrokerConfig, camel
from shmq.errors import ConfigError


def test_defaults_are_rocketmqs():
    c = BrokerConfig()
    assert c.mapped_file_size_commit_log == 1 << 30 and c.flush_disk_type == "ASYNC_FLUSH"
    assert c.flush_interval_commit_log == 500 and c.flush_commit_log_least_pages == 4
    assert (c.file_reserved_time, c.delete_when, c.disk_max_used_space_ratio) == (72, "04", 75)
    assert c.max_message_size == 4 << 20 and c.default_topic_queue_nums == 4
    assert c.delay_levels_ms[:3] == [1000, 5000, 10000] and c.delay_levels_ms[-1] == 7_200_000


def test_broker_conf_with_rocketmq_names(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("# a RocketMQ broker.conf\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog = 1048576\n"
                 "fileReservedTime=48\nmessageIndexEnable=false\nwarmMapedFileEnable=false\n"
                 "diskSpaceWarningLevelRatio=95\n")
    c = BrokerConfig.load(p)
    assert c.flush_disk_type == "SYNC_FLUSH" and c.mapped_file_size_commit_log == 1 << 20
    assert c.file_reserved_time == 48 and c.message_index_enable is False and c.warm_mapped_file_enable is False
    assert c.disk_space_warning_level_ratio == pytest.approx(0.95)
    assert BrokerConfig.load(p) == BrokerConfig.from_mapping(
        {k: v for k, v in (line.split("=", 1) for line in c.to_properties().splitlines())})


def test_toml_with_snake_or_camel_names(tmp_path):
    p = tmp_path / "shmq.toml"
    p.write_text('[broker]\nflush_disk_type = "SYNC_FLUSH"\nflushIntervalCommitLog = 100\n')
    c = BrokerConfig.load(p)
    assert c.flush_disk_type == "SYNC_FLUSH" and c.flush_interval_commit_log == 100


@pytest.mark.parametrize("values, match", [
    ({"flushDiskType": "SOMETIMES"}, "flushDiskType"),
    ({"noSuchKey": 1}, "unknown config key"),
    ({"fileReservedTime": "soon"}, "not a valid int"),
    ({"deleteWhen": "25"}, "deleteWhen"),
    ({"mappedFileSizeConsumeQueue": 30}, "multiple of 20"),
])
def test_bad_config_is_a_clear_error(values, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig.from_mapping(values)


def test_malformed_conf_line(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("flushDiskType SYNC_FLUSH\n")
    with pytest.raises(ConfigError, match="broker.conf:1"):
        BrokerConfig.load(p)


def test_camel_names():
    assert camel("mapped_file_size_commit_log") == "mappedFileSizeCommitLog"
    assert camel("disk_max_used_space_ratio") == "diskMaxUsedSpaceRatio"
