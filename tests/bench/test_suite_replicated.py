"""``make bench``'s workload words (``--workloads replicated``) select the rows they name.

That the replicated rows give shmq numbers for SYNC_MASTER and ASYNC_MASTER (regression: the
SYNC_MASTER pair was once named ``bench<pid>s``, the SYNC_FLUSH broker's name, and its master
refused to start) is asserted by the QUICK suite's run in tests/bench/test_suite_smoke.py.
"""

from __future__ import annotations

from tools.bench.suite.runner import selected, workloads
from tools.bench.suite.settings import settings


def test_workload_words_select_by_substring_and_none_selects_all():
    wl = workloads(settings(True))
    keys = [k for k, _, _ in selected(wl, ["replicated"])]
    assert keys == ["replicated sync 8 senders 100B", "replicated async 8 senders 100B"]
    assert [k for k, _, _ in selected(wl, ["latency", "durable"])] == ["latency 100B", "durable 8 senders 100B"]
    assert selected(wl, None) == wl and selected(wl, []) == wl
    assert selected(wl, ["extras"]) == []
