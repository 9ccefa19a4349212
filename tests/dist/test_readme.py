"""README's notebook block (a function on every rank, `local=True`) runs as a script of its
own: rank 0's loss comes back and is printed; only the port is this machine's."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from disttools import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.readme_blocks import python_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_the_readme_notebook_block_runs_on_two_local_nodes(tmp_path):
    code = python_block("local=True")
    spec = f'spec={{"distributed": {{"backend": "gloo", "port": {free_port()}}}}}'
    assert code.count("local=True)") == 1
    script = tmp_path / "notebook.py"
    script.write_text(code.replace("local=True)", f"local=True, {spec})"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    loss = float(last)
    assert math.isfinite(loss) and loss < 0.5, done.stdout[-2000:]
