"""A server that answers 404 to everything (a wrong URL, a proxy's catch-all) is said to be
no Kubernetes API server, exit 3: not "no jobs in namespace", nor eight access FAILs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from click.testing import CliRunner

from kdist.cli import main
from tests.api.kubeconfigs import write_kubeconfig
from tests.api.runner import scrubbed_env

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def nowhere(tmp_path) -> Iterator[tuple[str, list[str]]]:
    """A kubeconfig whose server answers `404 page not found` (text) to every request."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _404(self) -> None:
            seen.append(f"{self.command} {self.path.split('?')[0]}")
            body = b"404 page not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = do_PATCH = _404

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield str(write_kubeconfig(tmp_path / "kubeconfig", url)), seen
    server.shutdown()
    server.server_close()


def run(kubeconfig: str, *args: str):
    return CliRunner().invoke(main, ["--kubeconfig", kubeconfig, *args], env=scrubbed_env(None))


@pytest.mark.parametrize("verb", [["list"], ["status", "demo"], ["delete", "demo"],
                                  ["logs", "demo"], ["wait", "demo"]])
def test_a_verb_says_the_server_is_no_kubernetes_api(nowhere, verb):
    kubeconfig, seen = nowhere
    res = run(kubeconfig, *verb)
    assert res.exit_code == 3, res.output
    assert "did not answer as a Kubernetes API server (404 on /version)" in res.output
    assert "no job" not in res.output and "  " not in res.output.splitlines()[-1]
    assert seen.count("GET /version") == 1


def test_check_fails_the_connection_and_skips_the_rest(nowhere):
    kubeconfig, _ = nowhere
    res = run(kubeconfig, "check")
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    connection = next(line for line in lines if " connection " in line)
    assert connection.startswith("FAIL") and "(404 on /version)" in connection
    assert not [line for line in lines if line.startswith("FAIL") and line is not connection]
    assert "1 required check(s) failed" in res.output


def test_a_404_on_a_list_reads_with_single_spaces():
    import json

    from kdist.kube.errors import Action, HttpError, api_error

    status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
    e = HttpError(404, "Not Found", json.dumps(status).encode())
    error = api_error(e, Action("list", "jobs", "default"), "https://x")
    assert str(error) == "no jobs in namespace default"
