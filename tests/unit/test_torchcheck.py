"""The launcher's torch check: the version read without importing torch, refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kdist.runtime import torchcheck
from kdist.shared.errors import LaunchError


def _stub_torch(root: Path, version_py: str | None) -> Path:
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the check must not import torch')\n")
    if version_py is not None:
        (pkg / "version.py").write_text(version_py)
    return root


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def make(version_py: str | None) -> None:
        monkeypatch.syspath_prepend(str(_stub_torch(tmp_path, version_py)))
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    return make


@pytest.mark.parametrize(("version_py", "want"), [
    ("__version__ = '2.3.1+cpu'\n", "2.3.1+cpu"),
    ('from typing import Optional\n__version__: str = "2.14.1+debian"\ngit_version = "x"\n',
     "2.14.1+debian"),
])
def test_the_version_is_read_from_the_package_python_would_import(stub, version_py, want):
    stub(version_py)
    assert torchcheck.installed_version() == want
    assert "torch" not in sys.modules


@pytest.mark.parametrize(("version", "refused"), [
    ("2.8.0", False), ("2.14.1+debian", False), ("2.15.0+cu130", False),
    ("2.3.1", True), ("2.7.1", True), ("2.16.0a0+git", True), ("3.0.0", True), ("weird", True),
])
def test_only_the_tested_minor_releases_pass(version, refused):
    why = torchcheck.refusal(version)
    assert (why is not None) == refused, why
    if refused:
        assert "kdist's runtime needs 2.8-2.15" in why


def test_the_refusal_names_the_image_torch_and_the_range():
    assert torchcheck.refusal("2.3.1").startswith(
        "torch 2.3 in this image; kdist's runtime needs 2.8-2.15")


def test_no_torch_is_not_refused_by_the_launcher(monkeypatch):
    monkeypatch.setattr(torchcheck.importlib.util, "find_spec", lambda name: None)
    assert torchcheck.installed_version() is None
    torchcheck.check({})


def test_check_raises_a_launch_error_exit_2_unless_told_to_try_any_torch(stub):
    stub("__version__ = '2.3.0'\n")
    with pytest.raises(LaunchError) as failed:
        torchcheck.check({})
    assert failed.value.exit_code == 2
    assert "torch 2.3 in this image" in str(failed.value)
    torchcheck.check({torchcheck.ANY_TORCH: "1"})


def test_the_escape_hatch_is_the_users_to_set_in_spec_env():
    """KDIST_ANY_TORCH is named KDIST_* yet the user's: a spec may set it, the pods get it
    (every other KDIST_* name stays refused)."""
    from kdist.rendering import render
    from kdist.shared.errors import SpecError
    from kdist.spec import validate_job
    from tests.unit.helpers import spec_with

    job = validate_job(spec_with(**{"spec.env": {"KDIST_ANY_TORCH": "1"}}))
    (container,) = render(job)[0]["spec"]["template"]["spec"]["containers"]
    assert {"name": "KDIST_ANY_TORCH", "value": "1"} in container["env"]
    with pytest.raises(SpecError, match="KDIST_ANY_TORCHES"):
        validate_job(spec_with(**{"spec.env": {"KDIST_ANY_TORCHES": "1"}}))
