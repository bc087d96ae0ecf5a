import pytest

from shmq.config import BrokerConfig, camel, delay_levels
from shmq.errors import ConfigError


def test_defaults_are_rocketmqs_except_the_footprint():
    c = BrokerConfig()
    assert c.flush_disk_type == "ASYNC_FLUSH" and c.broker_role == "ASYNC_MASTER"
    assert c.flush_interval_commit_log == 500 and c.flush_commit_log_least_pages == 4
    assert (c.file_reserved_time, c.delete_when, c.disk_max_used_space_ratio) == (72, "04", 75)
    assert c.max_message_size == 4 << 20 and c.default_topic_queue_nums == 4
    # one machine, not a server: 128 MiB segments (RocketMQ 1 GiB), warmed 16 MiB ahead (not all of it)
    assert c.mapped_file_size_commit_log == 128 << 20 and c.warm_ahead_size == 16 << 20
    assert c.mapped_file_size_consume_queue == 300_000 * 20
    assert c.broker_name is None and c.shm_group is None


def test_broker_conf_with_rocketmq_names(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text(
        "# a RocketMQ broker.conf\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog = 1048576\n"
        "fileReservedTime=48\nmessageIndexEnable=false\nwarmMapedFileEnable=false\n"
        "diskSpaceWarningLevelRatio=95\n"
    )
    c = BrokerConfig.load(p)
    assert c.flush_disk_type == "SYNC_FLUSH" and c.mapped_file_size_commit_log == 1 << 20
    assert c.file_reserved_time == 48 and c.message_index_enable is False and c.warm_mapped_file_enable is False
    assert c.disk_space_warning_level_ratio == pytest.approx(0.95)
    assert BrokerConfig.load(p) == BrokerConfig.from_mapping(
        dict(line.split("=", 1) for line in c.to_properties().splitlines())
    )


def test_toml_with_snake_or_camel_names(tmp_path):
    p = tmp_path / "shmq.toml"
    p.write_text('[broker]\nflush_disk_type = "SYNC_FLUSH"\nflushIntervalCommitLog = 100\n')
    c = BrokerConfig.load(p)
    assert c.flush_disk_type == "SYNC_FLUSH" and c.flush_interval_commit_log == 100


@pytest.mark.parametrize(
    "values, match",
    [
        ({"flushDiskType": "SOMETIMES"}, "flushDiskType"),
        ({"noSuchKey": 1}, "unknown config key"),
        ({"fileReservedTime": "soon"}, "not a valid int"),
        ({"deleteWhen": "25"}, "deleteWhen"),
        ({"mappedFileSizeConsumeQueue": 30}, "multiple of 20"),
        ({"maxClientsPerProcess": 0}, "maxClientsPerProcess must be at least 1"),
        ({"maxChannels": -1}, "maxChannels must be at least 1"),
        ({"maxRingBytesTotal": 0}, "maxRingBytesTotal must be at least 1"),
    ],
)
def test_bad_config_is_a_clear_error(values, match):
    with pytest.raises(ConfigError, match=match):
        BrokerConfig.from_mapping(values)


def test_malformed_conf_line(tmp_path):
    p = tmp_path / "broker.conf"
    p.write_text("flushDiskType SYNC_FLUSH\n")
    with pytest.raises(ConfigError, match=r"broker\.conf:1"):
        BrokerConfig.load(p)


def test_camel_names():
    assert camel("mapped_file_size_commit_log") == "mappedFileSizeCommitLog"
    assert camel("disk_max_used_space_ratio") == "diskMaxUsedSpaceRatio"


@pytest.mark.parametrize("key", ["osPageCacheBusyTimeOutMills"])
def test_keys_shmq_cannot_honour_yet_are_refused_not_ignored(key):
    with pytest.raises(ConfigError, match=f"config key '{key}' is not supported yet: .+"):
        BrokerConfig.from_mapping({key: "1s 5s"})


def test_delay_levels_take_rocketmq_units_and_refuse_malformed_ones():
    assert delay_levels(BrokerConfig().message_delay_level)[:3] == [1000, 5000, 10_000]
    assert len(delay_levels(BrokerConfig().message_delay_level)) == 18
    assert delay_levels("100ms 1.5s 2m 1h 1d") == [100, 1500, 120_000, 3_600_000, 86_400_000]
    assert BrokerConfig.from_mapping({"messageDelayLevel": "100ms 200ms"}).message_delay_level == "100ms 200ms"
    for bad in ("", "5", "1x", "-1s", "0ms", " ".join(["1s"] * 65)):
        with pytest.raises(ConfigError, match="messageDelayLevel"):
            BrokerConfig.from_mapping({"messageDelayLevel": bad})


def test_roles_are_refused_at_start_only_when_they_cannot_work():
    BrokerConfig().check_role()
    BrokerConfig.from_mapping({"brokerRole": "SYNC_MASTER"}).check_role()
    BrokerConfig.from_mapping({"brokerRole": "SLAVE", "haMasterAddress": "10.0.0.1:10912"}).check_role()
    for values, why in (
        ({"brokerRole": "SLAVE"}, "needs haMasterAddress"),
        ({"brokerRole": "SYNC_MASTER", "haListenPort": 0}, "needs haListenPort > 0"),
    ):
        with pytest.raises(ConfigError, match=f"brokerRole={values['brokerRole']} {why}"):
            BrokerConfig.from_mapping(values).check_role()
    for bad in ("nohost", "h:0", ":80", "h:99999", "h:x"):
        with pytest.raises(ConfigError, match="haMasterAddress must be host:port"):
            BrokerConfig.from_mapping({"haMasterAddress": bad})


def test_broker_name_names_the_broker_unless_name_contradicts_it(monkeypatch):
    monkeypatch.delenv("SHMQ_BROKER", raising=False)
    assert BrokerConfig().resolve_name(None) == "default"
    assert BrokerConfig().resolve_name("a") == "a"
    c = BrokerConfig.from_mapping({"brokerName": "orders"})
    assert c.resolve_name(None) == "orders" and c.resolve_name("orders") == "orders"
    with pytest.raises(ConfigError, match="--name 'other' contradicts brokerName='orders'"):
        c.resolve_name("other")
    with pytest.raises(ConfigError, match=r"brokerName 'a\.b'"):
        BrokerConfig.from_mapping({"brokerName": "a.b"})


def test_shm_group_by_name_or_number():
    assert BrokerConfig().group_id() is None
    assert BrokerConfig.from_mapping({"shmGroup": "0"}).group_id() == 0
    assert BrokerConfig.from_mapping({"shmGroup": "root"}).group_id() == 0
    with pytest.raises(ConfigError, match="no such group"):
        BrokerConfig.from_mapping({"shmGroup": "no-such-group-here"}).group_id()


def test_unset_keys_stay_unset_through_a_broker_conf():
    c = BrokerConfig.from_mapping({"warmAheadSize": 0})
    text = c.to_properties()
    assert "brokerName" not in text and "shmGroup" not in text and "warmAheadSize=0" in text
    assert BrokerConfig.from_mapping(dict(line.split("=", 1) for line in text.splitlines())) == c


def test_shmq_broker_names_a_broker_given_no_name_nor_brokername(monkeypatch):
    """A broker started with no name takes the name its clients look for ($SHMQ_BROKER)."""
    monkeypatch.setenv("SHMQ_BROKER", "envname")
    assert BrokerConfig().resolve_name(None) == "envname"
    assert BrokerConfig().resolve_name("a") == "a"
    assert BrokerConfig.from_mapping({"brokerName": "orders"}).resolve_name(None) == "orders"


def test_every_key_has_a_unit_reader_and_meaning():
    """The configuration reference is rendered from KEY_DOCS: every field has an entry that says
    what it does, and no entry names a field that is gone."""
    import dataclasses

    from shmq.config_keys import KEY_DOCS

    fields = [f.name for f in dataclasses.fields(BrokerConfig)]
    assert [f for f in fields if f not in KEY_DOCS] == []
    assert [k for k in KEY_DOCS if k not in fields] == []
    assert [k for k, doc in KEY_DOCS.items() if not doc.meaning.strip() or not doc.read_by.strip()] == []
