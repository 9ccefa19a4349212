"""The Python API in its own words: a namespace needs no kubeconfig, errors name keywords
(`kubeconfig=`), the shortcuts the docs list exist, `dir(kdist)` is the API alone, a
function's traceback says its own `file:line`, and a cluster run names its image."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import kdist
from kdist.api.clients import Client
from kdist.shared.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_clients_namespace_needs_no_kubeconfig(no_kubeconfig):
    assert Client(namespace="team-a").namespace == "team-a"
    assert kdist.namespace(namespace="team-a") == "team-a"


def test_api_errors_name_the_keyword_the_cli_names_the_flag(no_kubeconfig):
    with pytest.raises(UsageError) as e:
        _ = Client().namespace
    assert "give kubeconfig= or set KUBECONFIG" in str(e.value) and "--" not in str(e.value)
    from kdist.cli import main

    res = CliRunner().invoke(main, ["status", "x"])
    assert res.exit_code == 2 and "give --kubeconfig or set KUBECONFIG" in res.output
    with pytest.raises(UsageError) as e:  # and back to the API's words after the CLI ran
        _ = Client().namespace
    assert "give kubeconfig=" in str(e.value)


def test_check_fix_names_the_keyword_in_python(no_kubeconfig):
    [first, *_] = Client().check()
    assert first.status == "fail" and "point kubeconfig= " in (first.fix or "")


@pytest.mark.parametrize("name", ["validate", "plot", "load"])
def test_the_shortcuts_the_docs_list_exist(name):
    method = getattr(Client, name)
    assert getattr(kdist, name).__doc__.startswith((method.__doc__ or "").strip()[:40])


def test_validate_and_load_shortcuts_work_on_a_file():
    example = str(ROOT / "examples" / "ddp-cpu.yaml")
    assert kdist.validate(example).summary.endswith("ok (indexed-job, 2 node(s) x 1 proc(s), "
                                                    "gloo)")
    assert kdist.load(example, namespace="team-a").metadata.namespace == "team-a"


def test_dir_kdist_is_the_api_alone():
    names = dir(kdist)
    for helper in ("Any", "TYPE_CHECKING", "importlib", "annotations"):
        assert helper not in names
    assert {"train", "Client", "validate", "plot", "load", "__version__"} <= set(names)


SCRIPT = '''\
from kdist.api.calls import _function


def fit(scale):
    total = scale * 2
    raise KeyError("loss")


if __name__ == "__main__":
    root, command, what = _function(fit, None, [3])
    print(root, command[-1])
'''


def test_a_script_function_reports_its_own_file_and_line(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0"}
    root, call = subprocess.run([sys.executable, str(script)], env=env, check=True,
                                capture_output=True, text=True).stdout.split()
    assert Path(root) == tmp_path
    ran = subprocess.run([sys.executable, "-m", "kdist.runtime.call", call], cwd=tmp_path,
                         env=env, capture_output=True, text=True)
    assert ran.returncode == 1
    assert f'File "{tmp_path / "fit.py"}", line 6, in fit' in ran.stderr, ran.stderr
    assert 'raise KeyError("loss")' in ran.stderr  # the shipped file's own line, shown
    assert "<kdist.train source>" not in ran.stdout + ran.stderr
    [frame] = [line for line in ran.stdout.splitlines() if line.startswith("KDIST-ERROR ")]
    assert json.loads(base64.b64decode(frame.split()[1]))["where"] == "fit.py:6"


def test_train_on_a_cluster_without_an_image_is_refused(no_kubeconfig):
    def fit() -> int:
        return 1

    with pytest.raises(UsageError, match=r"image: train\(\) on a cluster needs image="):
        Client(namespace="team-a").train(fit, nodes=2)
    # Nothing is read or sent first: no kubeconfig exists here, and that is not the error.
    assert not (no_kubeconfig / ".kube").exists()
