"""How many messages a clustering push group delivers twice when a member dies or comes and goes
(the scenarios of tools/chaos/member_kill_dups, on a tracked broker)."""

from __future__ import annotations

from tools.chaos import member_kill_dups

MESSAGES = 2000
RATE = 1000.0  # per second: a member consumes about 500 a second, so 100 ms of it is about 50


def test_a_sigkilled_member_leaves_only_its_last_commit_interval_to_come_again(store_dir, broker_name):
    r = member_kill_dups.run("kill", MESSAGES, RATE, broker_name, store_dir)
    assert r["lost"] == 0
    # what the dead member consumed after its last commit (0.1 s apart) and had in its listener;
    # with commits a second apart this was about 250 (up to 500)
    assert r["duplicates"] <= 150, r


def test_members_joining_and_leaving_cleanly_deliver_each_message_once(store_dir, broker_name):
    r = member_kill_dups.run("churn", MESSAGES, RATE, broker_name, store_dir)
    assert r["lost"] == 0
    assert r["duplicates"] == 0, r
