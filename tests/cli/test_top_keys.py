"""`shmq top`'s key map (pure) and its one-frame mode without a broker."""

from __future__ import annotations

import subprocess
import sys

from shmq.cli.top import on_key
from shmq.monitor.render import SORTS, View


def press(keys: str, view: View = View()) -> tuple[View, bool]:
    quit_ = False
    for k in keys:
        view, quit_ = on_key(view, k)
    return view, quit_


def test_q_quits_and_s_cycles_the_sort() -> None:
    assert press("q")[1] and not press("s")[1]
    assert press("s")[0].sort == SORTS[1]
    assert press("s" * len(SORTS))[0].sort == SORTS[0]


def test_slash_types_a_filter_enter_applies_esc_clears() -> None:
    typing, _ = press("/Ord")
    assert typing.editing and typing.filter == "Ord"
    applied, quit_ = press("ers\x7f\r", typing)  # a backspace, then Enter
    assert (applied.filter, applied.editing, quit_) == ("Order", False, False)
    assert press("q", typing)[0].filter == "Ordq" and not press("q", typing)[1]  # q is text while typing
    cleared, _ = press("/x\x1b", applied)
    assert (cleared.filter, cleared.editing) == ("", False)


def test_a_toggles_system_topics() -> None:
    assert press("a")[0].show_system and not press("aa")[0].show_system


def test_one_frame_on_a_pipe_when_the_broker_is_down() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "shmq", "top", "--name", "nobody-runs-this", "--interval", "0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "broker down - waiting for it" in out.stdout and "nobody-runs-this" in out.stdout
