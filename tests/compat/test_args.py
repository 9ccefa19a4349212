"""`$(VAR)` in a job's args means the same in `kdist run --local` as in a pod.

The kubelet expands `$(NAME)` in a container's command and args from the variables the
container spec defines (its env, not the image's nor the host's); `$$` is a literal `$`;
an unknown or unclosed reference, and `$` before anything but `(` or `$`, stay as written.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from compattools import run_kdist, write_job

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]


def test_args_are_expanded_as_the_kubelet_does(tmp_path):
    code, run = run_kdist(write_job(tmp_path, "args"), tmp_path, timeout=90)
    assert code == 0, run.text
    ckpt = tmp_path / ".kdist" / "compat-args" / "checkpoints"  # the local KDIST_CHECKPOINT_DIR
    want = [
        "--output_dir", f"{ckpt}/run",
        "$(KDIST_JOB_NAME)",  # $$ escapes
        "$(NOPE)",  # not defined: kept
        "nightly-2",  # the spec's env and the contract's
        os.environ["HOME"],  # the HOME the nodes get: a pod's is kdist's, a local run's ours
        "$nightly",  # $$ then a reference
        "$(RUN_TAG",  # unclosed: kept
        "$RUN_TAG",  # no parenthesis: kept
        "100$",
    ]
    seen = {}
    for line in run.lines:
        m = re.search(r"ARGV (\{.*\})$", line.text)
        if m:
            probe = json.loads(m.group(1))
            seen[probe["rank"]] = probe["argv"]
    assert sorted(seen) == ["0", "1"], run.text
    for rank, argv in seen.items():
        assert argv == want, f"rank {rank}:\n got  {argv}\n want {want}"
