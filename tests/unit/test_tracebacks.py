"""The user's own `file:line` in a failing rank's traceback (#39): the innermost frame that
is neither torch's, kdist's nor the standard library's; in the launcher's failure clause,
in `train()`'s error line, and in `kdist run --local`'s last line."""

from __future__ import annotations

import base64
import json
import os
import sysconfig

import pytest

from kdist.cli.running import RunSummary
from kdist.runtime.failures import cause
from kdist.shared import frames
from kdist.shared.tracebacks import user_frame

SITE = sysconfig.get_paths()["purelib"]
STDLIB = sysconfig.get_paths()["stdlib"]
KDIST = os.path.dirname(os.path.dirname(os.path.abspath(frames.__file__)))
IMAGE = "/opt/conda/lib/python3.11/site-packages"  # another interpreter's (a pod's)


def traceback(*frames_: tuple[str, int], last: str = "ZeroDivisionError: division by zero",
              prefix: str = "") -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line in frames_:
        lines += [f'  File "{path}", line {line}, in f', "    code()"]
    return "\n".join(prefix + line for line in [*lines, last]) + "\n"


def test_the_innermost_users_frame_is_named_relative_to_the_workers_directory():
    text = traceback((f"{KDIST}/runtime/worker_exec.py", 40), ("/workspace/train.py", 42),
                     ("/workspace/model/net.py", 7), (f"{SITE}/torch/nn/modules/module.py", 1),
                     (f"{STDLIB}/functools.py", 3))
    assert user_frame(text, "/workspace") == "model/net.py:7"
    assert user_frame(text) == "/workspace/model/net.py:7"


def test_another_interpreters_libraries_are_not_the_users():
    text = traceback(("/workspace/train.py", 42), (f"{IMAGE}/torch/distributed/c10d.py", 9),
                     ("/usr/lib/python3.11/threading.py", 5), ("<frozen runpy>", 88))
    assert user_frame(text, "/workspace") == "train.py:42"


def test_torchs_rank_prefixes_and_chains_read_the_last_traceback():
    first = traceback(("/workspace/data.py", 3), last="KeyError: 'x'")
    chained = (first + "\nThe above exception was the direct cause of the following "
               "exception:\n\n" + traceback(("/workspace/train.py", 42),
                                             last="RuntimeError: no data"))
    assert user_frame(chained, "/workspace") == "train.py:42"
    assert user_frame(traceback(("/w/train.py", 9), prefix="[rank1]: "), "/w") == "train.py:9"


@pytest.mark.parametrize("text", [
    "no traceback at all\n",
    traceback((f"{SITE}/torch/x.py", 1), (f"{KDIST}/workloads/ddp.py", 2)),  # kdist's own
])
def test_no_users_frame_names_nothing(text):
    assert user_frame(text) is None


def test_the_launchers_cause_ends_with_where():
    tail = traceback(("/workspace/train.py", 42), (f"{SITE}/torch/x.py", 1))
    assert cause(None, tail, "/workspace") == ": ZeroDivisionError: division by zero " \
                                              "(train.py:42)"
    # From the error file (@record) too, the output's traceback telling where.
    assert cause({"message": "ValueError: bad"}, tail, "/workspace") == \
        ": ValueError: bad (train.py:42)"


def test_trains_error_line_carries_where():
    line = frames.error_line(1, "ZeroDivisionError", "division by zero", ["..."], "fit.py:4")
    info = json.loads(base64.b64decode(line.split(" ", 1)[1]))
    assert info["where"] == "fit.py:4"
    assert "where" not in json.loads(base64.b64decode(
        frames.error_line(1, "E", "m", []).split(" ", 1)[1]))


def test_the_local_runs_last_line_names_the_most_telling_failure():
    s = RunSummary("demo")
    s.feed('[rank 0] {"event": "step", "step": 3, "loss": 0.5}')
    s.feed("[node 0] kdist.launch: worker rank 0 (node 0, local rank 0, pid 1) exited with "
           "code 1: RuntimeError: Connection reset by peer; exiting 203: lost a peer")
    s.feed("[node 1] kdist.launch: worker rank 1 (node 1, local rank 0, pid 2) exited with "
           "code 1: ZeroDivisionError: division by zero (train.py:42); exiting 1: a code error")
    line = s.line(1, None)
    assert line.endswith(": rank 1 exited with code 1: ZeroDivisionError: division by zero "
                         "(train.py:42); at step 3, last loss 0.5"), line
    assert "rank 1" not in s.line(0, None) and "rank 1" not in s.line(130, 2)
