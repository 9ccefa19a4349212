"""What the cluster says reaches the user's terminal as text: never obeyed, never markup.

A reason, a message, a node name or a label value is the API server's to choose
(a compromised or hostile cluster, or anyone who may write a condition). kdist
shows an escape sequence in it as text (``^[``, as kubectl since CVE-2021-25743)
and never lets rich read ``[...]`` in it as markup (which crashed the tables or
hid a link), through the real CLI against the fake API server.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.runner import Outcome

pytestmark = pytest.mark.timeout(60)

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write "evil" to the user's clipboard
CLIPBOARD_SHOWN = "^[]52;c;ZXZpbA==^G"
TITLE = "\x1b]0;pwned\x07"  # OSC 0: retitle the window
CSI = "\x9b2J"  # the one-byte C1 CSI: clear the screen
UNMATCHED = "oops[/bold]"  # rich markup: a closing tag that matches nothing (MarkupError)
BOLD = "[bold]x[/]"  # rich markup: applied, the brackets would vanish
LINK = "[link=http://evil]ok[/link]"  # rich markup: a hyperlink hidden behind "ok"
REPO = Path(__file__).resolve().parents[2]


def obeyable(text: str) -> list[str]:
    """What of `text` a terminal would obey that no cluster word may bring: ESC, BEL, C1."""
    return [c for c in ("\x1b", "\x07", "\x9b") if c in text]


def assert_shown(out: Outcome, *texts: str) -> None:
    detail = out.describe()
    assert out.crash is None and "Traceback" not in out.stderr, detail
    assert not obeyable(out.stdout) and not obeyable(out.stderr), detail
    for text in texts:
        assert text in out.stdout, f"{text!r} not shown as it is:\n{detail}"


def failed_pod(job: dict[str, Any], rank: int, reason: str, node: str,
               message: str = "") -> dict[str, Any]:
    pod = objects.pod(job, rank, exit_code=1)
    pod["spec"]["nodeName"] = node
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(
        reason=reason, message=message)
    return pod


def test_status_shows_hostile_reasons_and_node_names_as_text(api, kdist):
    job = api.add(objects.job("evil", outcome="Failed"))[0]
    job["status"]["conditions"][0].update(reason=BOLD, message=f"{TITLE}{CSI} line\nbreak")
    api.store.update(job)
    api.add(failed_pod(job, 0, UNMATCHED, f"n0{CLIPBOARD}", message=f"said {TITLE}"),
            failed_pod(job, 1, LINK, "n1"))
    out = kdist("status", "evil")
    assert out.code == 0, out.describe()
    assert_shown(out, UNMATCHED, LINK, BOLD, f"n0{CLIPBOARD_SHOWN}", "^[]0;pwned^GM-^[2J",
                 "line^Jbreak", "said ^[]0;pwned^G")


def test_list_shows_hostile_label_values_as_text(api, kdist):
    one, two = objects.job("one"), objects.job("two")
    one["metadata"]["labels"][objects.BACKEND] = UNMATCHED
    two["metadata"]["labels"][objects.BACKEND] = f"{CLIPBOARD}{LINK}"
    api.add(one, two)
    out = kdist("list")
    assert out.code == 0, out.describe()
    assert_shown(out, UNMATCHED, f"{CLIPBOARD_SHOWN}{LINK}")


def test_wait_shows_job_names_from_a_list_as_text(api, kdist):
    api.add(objects.job(f"done{TITLE}", outcome="Complete"))
    out = kdist("wait", "--all")
    assert out.code == 0, out.describe()
    assert_shown(out, "job done^[]0;pwned^G succeeded")


def test_an_api_error_message_is_one_escaped_line(api, kdist):
    api.fail(403, message=f"no {CLIPBOARD} for you\nerror: a line of its own", path=None,
             method="GET")
    out = kdist("status", "evil")
    line = error_line(out, 3, f"no {CLIPBOARD_SHOWN} for you^Jerror: a line of its own")
    assert not obeyable(out.stderr), line


# ---- on a terminal -------------------------------------------------------------------------


def on_a_terminal(api: FakeApi, kubeconfig: Path, *args: str, limit: float = 45) -> str:
    """`kdist ARGS` with a pseudo-terminal (200 columns) as stdout and stderr: the live
    table, rich's own colours; everything it wrote."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HTTP", "http"))}
    # COLUMNS too: rich reads it before the terminal's size, and a runner may set it to 80.
    env.update(TERM="xterm-256color", COLUMNS="200", LINES="50",
               PYTHONPATH=os.pathsep.join(  # this checkout's kdist
                   p for p in (str(REPO), env.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "kdist", "--kubeconfig", str(kubeconfig),
                             *args], stdin=subprocess.DEVNULL, stdout=child, stderr=child,
                            env=env, cwd=kubeconfig.parent)
    os.close(child)
    chunks, deadline = [], time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text
    return text


def test_submit_live_table_and_logs_on_a_terminal(api, kubeconfig, spec):
    """The live table (a hostile reason in a cell) and `-f` log lines on a terminal: the
    log keeps its colours, any other sequence in it is shown, not obeyed."""
    def finish() -> None:
        job = api.store.get_stored("jobs", "demo")
        for rank in (0, 1):
            api.set_log(f"demo-{rank}-abcde", f"\x1b[31mred\x1b[0m {CLIPBOARD}{TITLE}\n"
                        + objects.step_log(rank))
            pod = objects.pod(job, rank, exit_code=0)
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = UNMATCHED
            pod["spec"]["nodeName"] = f"n{CLIPBOARD}"
            api.add(pod)
        api.store.update(dict(job, status={"conditions": [{"type": "Complete",
                                                           "status": "True"}]}))
    api.on_watch["jobs"] = finish
    text = on_a_terminal(api, kubeconfig, "submit", "-f", "--timeout", "20", str(spec))
    assert "\x1b]" not in text and "\x07" not in text and "\x9b" not in text, repr(text)
    assert UNMATCHED in text, repr(text)  # the table's cell, as text
    assert f"{CLIPBOARD_SHOWN}^[]0;pwned^G" in text, repr(text)
    assert "\x1b[31mred" in text, repr(text)  # the log's own colour
