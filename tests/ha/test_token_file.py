"""Where each HA side gets its token (shmq.ha.token) and that no session takes an empty one."""

from __future__ import annotations

import os
import stat

import pytest

from shmq.config import BrokerConfig
from shmq.errors import ConfigError
from shmq.ha import protocol as P
from shmq.ha.token import master_token, replica_token, token_path


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_master_without_a_token_generates_one_private_file_once(tmp_path) -> None:
    store = str(tmp_path / "store")
    first = master_token(store, BrokerConfig())
    path = token_path(store)
    assert first.generated and first.source == path and len(first.secret) == 64
    assert _mode(path) == 0o600 and os.stat(path).st_uid == os.getuid()
    again = master_token(store, BrokerConfig())
    assert (again.secret, again.generated) == (first.secret, False)
    assert os.listdir(os.path.dirname(path)) == ["ha.token"]  # no temp file left behind
    assert master_token(str(tmp_path / "other"), BrokerConfig()).secret != first.secret


def test_a_configured_token_wins_and_a_token_file_is_read(tmp_path) -> None:
    store = str(tmp_path / "store")
    assert master_token(store, BrokerConfig(ha_auth_token="s3cret")).secret == "s3cret"
    assert not os.path.exists(token_path(store))  # nothing generated when one is configured
    f = tmp_path / "copy.token"
    f.write_text("from-the-master\n")
    f.chmod(0o600)
    cfg = BrokerConfig.from_mapping({"haAuthTokenFile": str(f)})
    assert master_token(store, cfg).secret == replica_token(store, cfg).secret == "from-the-master"


def test_a_replica_is_never_given_a_token_it_was_not_told(tmp_path) -> None:
    store = str(tmp_path / "replica")
    with pytest.raises(ConfigError, match=r"needs its master's HA token.*config/ha\.token.*haAuthTokenFile"):
        replica_token(store, BrokerConfig())
    assert not os.path.exists(token_path(store))  # a replica generates nothing
    os.makedirs(os.path.dirname(token_path(store)))
    with open(token_path(store), "w") as f:
        f.write("copied\n")
    os.chmod(token_path(store), 0o600)
    assert replica_token(store, BrokerConfig()).secret == "copied"


@pytest.mark.parametrize(
    "content, mode, message",
    [
        ("tok\n", 0o644, "readable by other users \\(mode 0644\\): chmod 600"),
        ("tok\n", 0o640, "readable by other users"),
        (" \n", 0o600, "is empty"),
    ],
)
def test_unusable_token_files_are_refused_in_one_line(tmp_path, content: str, mode: int, message: str) -> None:
    f = tmp_path / "t"
    f.write_text(content)
    f.chmod(mode)
    cfg = BrokerConfig.from_mapping({"haAuthTokenFile": str(f)})
    with pytest.raises(ConfigError, match=message):
        replica_token(str(tmp_path), cfg)
    with pytest.raises(ConfigError, match="No such file"):
        master_token(str(tmp_path), BrokerConfig.from_mapping({"haAuthTokenFile": str(tmp_path / "missing")}))


def test_token_and_token_file_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="one of haAuthToken and haAuthTokenFile"):
        BrokerConfig.from_mapping({"haAuthToken": "a", "haAuthTokenFile": "/x"})


def test_no_session_takes_an_empty_token() -> None:
    with pytest.raises(ValueError, match="non-empty haAuthToken"):
        P.MasterSession(b"")
    with pytest.raises(ValueError, match="non-empty haAuthToken"):
        P.ReplicaSession(b"", "r", 1 << 20)
