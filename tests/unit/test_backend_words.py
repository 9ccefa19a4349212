"""What the CLI and the API say names every backend (not "both"), `check --help` lists
PodGroups, and no internal class name (NotedHTTPSConnection) reaches a message."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kdist.api.clients import Client
from kdist.api.types import BACKEND_NAMES
from kdist.cli import main
from tests.unit.golden import ROOT


def help_of(verb: str) -> str:
    return " ".join(CliRunner().invoke(main, [verb, "--help"], terminal_width=200).output.split())


def test_list_help_and_client_list_jobs_name_every_backend():
    for text in (help_of("list"), " ".join((Client.list_jobs.__doc__ or "").split())):
        assert "both" not in text, text
        assert "Indexed Jobs, JobSets, PyTorchJobs" in text, text


def test_the_starters_backend_comment_names_every_backend():
    [line] = [line for line in (ROOT / "kdist" / "cli" / "starter.yaml").read_text()
              .splitlines() if line.strip().startswith("backend: indexed-job")]
    comment = line.partition("#")[2]
    assert all(name in comment for name in BACKEND_NAMES), line


def test_check_help_lists_podgroups():
    assert "PodGroups" in help_of("check")


@pytest.mark.timeout(30)
def test_a_refused_connection_names_no_internal_class(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for verb in (["list"], ["check"]):
        res = CliRunner().invoke(main, ["--kubeconfig", str(kubeconfig), *verb])
        assert res.exit_code in (1, 3), res.output
        assert "Connection refused" in res.output or "unreachable" in res.output, res.output
        assert "Noted" not in res.output and "Connection(host=" not in res.output, res.output
        assert " object at 0x" not in res.output, res.output
