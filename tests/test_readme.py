"""The README's "Use" snippet runs as written and shows a consumed message."""
from __future__ import annotations

import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def _use_snippet() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m is not None, "the Use section has no python code block"
    return m.group(1)


def test_readme_use_snippet_runs_clean(tmp_path):
    """Regression (issue 9 A7): the snippet ended with errors on stderr (the consumer outlived
    the broker) and showed no consumed message."""
    code = _use_snippet()
    assert '"/var/lib/shmq"' in code and 'name="default"' in code
    name = f"readme{os.getpid()}"  # not the machine's "default" broker
    code = code.replace('"/var/lib/shmq"', repr(str(tmp_path / "store"))).replace('"default"', repr(name))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert out.stdout.splitlines()[0].startswith("SendStatus.SEND_OK ")
    assert "consumed Orders TagA order-1 b'body'" in out.stdout
