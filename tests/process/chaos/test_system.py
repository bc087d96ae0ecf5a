"""A short round of the whole-system chaos run (tools/chaos/system.py): SIGKILLs of the broker,
its HA sender, the replica, producers and consumers under sync sends, every invariant checked."""

from __future__ import annotations

from tools.chaos.system import failed, run


def test_a_few_rounds_of_random_kills_keep_every_invariant(tmp_path):
    # this seed kills the HA sender, a producer, a consumer and the broker, in that order
    summary = run(rounds=4, seed=22, work=str(tmp_path), progress=False)
    assert failed(summary) == [], summary
    assert summary["kills"] == {"ha-sender": 1, "p": 1, "c": 1, "broker": 1} and summary["acked"] > 0, summary
