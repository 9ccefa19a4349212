"""The Python API is what the docs sell: real signatures, every documented name importable.

`kdist.submit` and the other shortcuts spell out their Client method's parameters (so
`help()` and a notebook show them, not `**kwargs`), and a test here holds the two
equal; everything `kdist.api` exports, and every `kdist.NAME` the README and docs
use, is importable from `kdist`.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import kdist
import kdist.api
from kdist.api import shortcuts
from kdist.api.clients import Client
from kdist.shared.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
SHORTCUTS = sorted(set(shortcuts.__all__) - {"client", "namespace"})


def _params(fn) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation)
            for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", SHORTCUTS)
def test_a_shortcut_takes_its_client_methods_parameters_and_the_target(name):
    fn, method = getattr(shortcuts, name), getattr(Client, name)
    params = inspect.signature(fn).parameters.values()
    assert not [p for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)], name
    own = [p for p in _params(fn) if p[0] not in shortcuts.TARGET]
    assert own == _params(method)[1:], f"kdist.{name} and Client.{name} differ"
    target = [p for p in params if p.name in shortcuts.TARGET]
    assert [p.name for p in target] == list(shortcuts.TARGET)
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in target), name
    assert inspect.signature(fn).return_annotation == \
        inspect.signature(method).return_annotation, name
    assert (method.__doc__ or "").strip() in (fn.__doc__ or ""), name
    assert "kubeconfig=" in (fn.__doc__ or ""), name


@pytest.mark.parametrize("name", SHORTCUTS)
def test_every_shortcut_is_importable_from_kdist(name):
    assert getattr(kdist, name) is getattr(shortcuts, name)


def test_everything_the_api_exports_is_importable_from_kdist():
    assert set(kdist.api.__all__) <= set(kdist.__all__)
    for name in kdist.api.__all__:
        assert getattr(kdist, name) is getattr(kdist.api, name), name
    assert sorted(kdist.__all__) == sorted(kdist._LAZY)
    assert set(kdist.__all__) <= set(dir(kdist))  # a notebook's completion offers them


def _documented_names() -> set[str]:
    """Every `kdist.NAME` the README and docs/ write that is not a submodule (nor a label)."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    names = set(re.findall(r"(?<![\w./-])kdist\.([A-Za-z_]\w*)(?![\w/-])", text))
    # Results and errors docs/python-api.md names bare, as importable from kdist.
    names |= {"Submission", "JobState", "Step", "RankLog", "JobSummary", "Deleted",
              "UsageError", "JobNotFound", "ClusterError", "JobFailed", "TimedOut",
              "KdistError", "SpecError", "TrainingJob"}
    return {n for n in names if n != "dev" and importlib.util.find_spec(f"kdist.{n}") is None}


def test_every_name_the_docs_use_is_importable_from_kdist():
    documented = _documented_names()
    assert {"train", "Client", "render", "submit", "status"} <= documented  # the scan works
    missing = sorted(n for n in documented if not hasattr(kdist, n))
    assert missing == [], missing


def test_render_takes_a_job_file_path_or_a_job(tmp_path):
    path = ROOT / "examples" / "ddp-cpu.yaml"
    from_path = kdist.render(str(path))
    assert from_path == kdist.render(kdist.load_job(path)) == kdist.render(path)
    assert [o["kind"] for o in from_path][:1] in (["Job"], ["Service"], ["PyTorchJob"])


@pytest.mark.parametrize("bad", [5, None, b"job.yaml", ["job.yaml"]])
def test_render_of_anything_else_is_a_usage_error_naming_it(bad):
    with pytest.raises(UsageError, match="job"):
        kdist.render(bad)
