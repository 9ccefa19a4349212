"""Hostile kubeconfig files: refused quickly (exit 2, one line), bounded in time and memory.

The spec reader already bounds its input (size, nodes, depth, aliases); issue 14 asks
the same of the kubeconfig. Each case runs kdist as a child process (a FIFO blocks
an open() forever), measured against a plain run on this machine now (`baseline`).
"""

from __future__ import annotations

import pytest

from tests.api import kubeconfigs
from tests.api.checks import error_line

SLACK = 3.0  # seconds beyond a plain run's
MEMORY_SLACK_MB = 40  # beyond a plain run's peak; the 50 MB file read whole would exceed it
KILL_AFTER = 15.0  # seconds beyond a plain run's: by then the case has failed anyway

pytestmark = pytest.mark.timeout(180)

VERBS = {"list": ["list"], "delete": ["delete", "demo"]}


def _refused(out, baseline, path) -> None:
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 2, str(path))
    assert out.requests == [], out.describe()
    assert out.seconds <= baseline.seconds + SLACK, \
        f"a plain run took {baseline.seconds:.1f}s:\n{out.describe()}"
    assert out.max_rss_mb <= baseline.max_rss_mb + MEMORY_SLACK_MB, \
        f"peak {out.max_rss_mb:.0f} MB, a plain run {baseline.max_rss_mb:.0f} MB"


@pytest.mark.parametrize("verb", VERBS)
def test_an_alias_bomb(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.alias_bomb(tmp_path / "bomb.yaml", api.url)
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


@pytest.mark.parametrize("verb", VERBS)
def test_a_huge_kubeconfig(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.huge(tmp_path / "huge.yaml", api.url, megabytes=50)
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


@pytest.mark.parametrize("verb", VERBS)
def test_a_fifo_as_kubeconfig(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.fifo(tmp_path / "fifo")
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


def test_a_directory_as_kubeconfig(api, kdist, tmp_path):
    out = kdist("list", kubeconfig=tmp_path)
    error_line(out, 2, str(tmp_path))
    assert out.requests == [], out.describe()


def test_a_kubeconfig_that_is_not_yaml(api, kdist, tmp_path):
    path = tmp_path / "binary"
    path.write_bytes(b"\x00\x01\x02kind: Config\xff\xfe")
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path))
    assert out.requests == [], out.describe()
