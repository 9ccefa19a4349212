"""manifests/ is generated from examples/ and must never go stale."""

from __future__ import annotations

import kubernetes_validate

from kdist.rendering import addons
from kdist.rendering.manifests import stale, write
from tests.unit.golden import ROOT


def test_committed_manifests_are_fresh():
    assert stale(ROOT / "examples", ROOT / "manifests") == [], "run `make manifests`"


def test_stale_check_catches_edits(tmp_path):
    write(ROOT / "examples", tmp_path)
    assert stale(ROOT / "examples", tmp_path) == []
    (tmp_path / "ddp-cpu.yaml").write_text("# edited\n")
    (tmp_path / "extra.yaml").write_text("{}\n")
    assert stale(ROOT / "examples", tmp_path) == ["ddp-cpu.yaml", "extra.yaml"]


def test_addons_pass_schemas():
    for obj in [addons.namespace(), *addons.rbac()]:
        kubernetes_validate.validate(obj, "1.37", strict=True)
    ns = addons.namespace()["metadata"]["labels"]
    assert ns["pod-security.kubernetes.io/enforce"] == "restricted"
