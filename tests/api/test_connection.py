"""The connection (issue 37): which proxy carries the token, which server is trusted with
it, and no secret (a server URL's password, a proxy's, a token) in anything kdist prints.

Proxies follow kubectl (client-go): a cluster's proxy-url first; else HTTP(S)_PROXY
with NO_PROXY, never for a loopback server. A fake proxy on loopback says whether
kdist went through it.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api import kubeconfigs
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.fakeproxy import FakeProxy
from tests.api.kubeconfigs import TOKEN
from tests.api.runner import run_process

pytestmark = pytest.mark.timeout(60)

SECRET = "s3cr3t-do-not-print"
NOWHERE = "kdist.invalid"  # RFC 6761: never resolves, fast
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": cluster}],
        "users": [{"name": "fake", "user": {"token": TOKEN} if user is None else user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                  "namespace": "default"}}]}))
    return path


def _printed(out) -> str:
    return out.stdout + out.stderr + (out.crash or "")


@pytest.fixture
def proxy() -> Iterator[FakeProxy]:
    server = FakeProxy().start()
    yield server
    server.stop()


def _other_port(api: FakeApi) -> str:
    return api.url.rsplit(":", 1)[1]


# ---- proxies ------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_env_proxy_never_carries_a_loopback_server(api, kdist, proxy, tmp_path, host):
    """kubectl never proxies loopback: the token stays on this machine."""
    path = _kubeconfig(tmp_path / "kc", {"server": f"http://{host}:{_other_port(api)}"})
    out = kdist("list", kubeconfig=path, env={v: proxy.url for v in PROXY_VARS})
    assert out.code == 0, out.describe()
    assert not proxy.contacted, f"went through the proxy: {proxy.seen}\n{out.describe()}"
    assert out.requests, out.describe()


@pytest.mark.parametrize("env,through", [
    ({"HTTP_PROXY": "{proxy}"}, True),
    ({"http_proxy": "{proxy}"}, True),
    ({"HTTP_PROXY": "{proxy}", "NO_PROXY": ".invalid"}, False),
    ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "*.invalid"}, False),
    ({"HTTP_PROXY": "{proxy}", "no_proxy": "example.com, kdist.invalid"}, False),
    ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "*"}, False),
    ({"HTTPS_PROXY": "{proxy}"}, False),  # the proxy for https servers, not http ones
    ({"ALL_PROXY": "{proxy}"}, False),  # kubectl does not read it
], ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else None)
def test_env_proxies_follow_kubectls_rules(api, kdist, proxy, tmp_path, env, through):
    """A server elsewhere: through the env proxy unless NO_PROXY names it."""
    path = _kubeconfig(tmp_path / "kc", {"server": f"http://{NOWHERE}:{_other_port(api)}"})
    out = kdist("list", kubeconfig=path,
                env={k: v.format(proxy=proxy.url) for k, v in env.items()})
    line = error_line(out, 3, NOWHERE)
    assert proxy.contacted is through, f"{proxy.seen}\n{out.describe()}"
    if through:
        assert proxy.seen[0][0].startswith(f"GET http://{NOWHERE}:"), proxy.seen
        assert "proxy" in line.lower(), out.describe()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_kubeconfigs_proxy_url_is_used_with_its_credentials(api, kdist, proxy, tmp_path,
                                                               scheme):
    """As kubectl: proxy-url wins over the environment and NO_PROXY, for loopback too;
    its user:password becomes Proxy-Authorization, and is never printed."""
    url = proxy.url.replace("://", f"://kdist:{SECRET}@")
    server = api.url.replace("http://", f"{scheme}://")
    path = _kubeconfig(tmp_path / "kc", {"server": server, "proxy-url": url})
    out = kdist("list", kubeconfig=path, env={"NO_PROXY": "*", "HTTP_PROXY": ""})
    assert proxy.contacted, out.describe()
    want = "CONNECT " if scheme == "https" else f"GET {server}/"
    assert proxy.seen[0][0].startswith(want + server.split("://")[1]
                                       if scheme == "https" else want), proxy.seen
    assert out.requests == [], out.describe()
    basic = base64.b64encode(f"kdist:{SECRET}".encode()).decode()
    assert proxy.seen[0][1].get("proxy-authorization") == f"Basic {basic}", proxy.seen
    error_line(out, 3, "proxy", proxy.url.split("://")[1])
    assert SECRET not in _printed(out), out.describe()


@pytest.mark.parametrize("url,said", [
    ("socks5://127.0.0.1:1080", "socks5"),
    ("ftp://127.0.0.1:21", "ftp"),
    ("127.0.0.1:3128", "proxy-url"),
    ("http://", "proxy-url"),
])
def test_a_proxy_url_kdist_cannot_use_is_refused(api, kdist, tmp_path, url, said):
    path = _kubeconfig(tmp_path / "kc", {"server": api.url, "proxy-url": url})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path), "clusters[fake].cluster.proxy-url", said)
    assert out.requests == [], out.describe()


# ---- trust --------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["certificate-authority", "certificate-authority-data"])
def test_a_ca_with_insecure_skip_tls_verify_is_refused(kdist, tmp_path, how):
    """kubectl refuses it too: with verification off, the CA checks nothing and the token
    goes to whichever server answers (here one the CA did not sign)."""
    server_dir, ca_dir = tmp_path / "server", tmp_path / "ca"
    server_dir.mkdir()
    ca_dir.mkdir()
    pair, ca = kubeconfigs.self_signed(server_dir), kubeconfigs.self_signed(ca_dir)
    if pair is None or ca is None:
        pytest.skip("no openssl CLI to make a certificate")
    api = FakeApi(tls=pair).start()
    try:
        ca_field = {how: str(ca.cert)} if how == "certificate-authority" else {
            how: base64.b64encode(ca.cert.read_bytes()).decode()}
        path = _kubeconfig(tmp_path / "kc", {"server": api.url, "insecure-skip-tls-verify": True,
                                             **ca_field})
        out = kdist("list", kubeconfig=path)
        error_line(out, 2, str(path), "clusters[fake].cluster.insecure-skip-tls-verify")
        assert api.requests == [], out.describe()
    finally:
        api.stop()


def test_insecure_skip_tls_verify_is_said_once(tmp_path):
    """urllib3 warns on every unverified request, each warning two lines naming its own
    file (34 for one `kdist check`); kdist says it once, in its own words."""
    pair = kubeconfigs.self_signed(tmp_path)
    if pair is None:
        pytest.skip("no openssl CLI to make a certificate")
    api = FakeApi(tls=pair).start()
    try:
        path = _kubeconfig(tmp_path / "kc", {"server": api.url, "insecure-skip-tls-verify": True})
        out = run_process(api, path, ["check"], limit=60)
        assert out.code == 0 and len(out.requests) > 2, out.describe()
        lines = out.stderr.splitlines()
        assert lines == [f"warning: TLS to {api.url} is not verified (the kubeconfig says "
                         "insecure-skip-tls-verify: true): whoever is in between can pose as "
                         "the server"], out.describe()
    finally:
        api.stop()


@pytest.mark.parametrize("how,value", [
    ("certificate-authority-data", "not base64 at all!"),
    ("certificate-authority-data", base64.b64encode(b"hello, no certificate").decode()),
    ("certificate-authority-data", base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n"
                                                    b"-----END CERTIFICATE-----\n").decode()),
    ("certificate-authority", "hello, no certificate\n"),
])
def test_a_ca_that_is_no_certificate_is_a_kubeconfig_error(api, kdist, tmp_path, how, value):
    """Not "cluster unreachable" (exit 3) once kdist tries to connect: the field at fault."""
    if how == "certificate-authority":
        (tmp_path / "ca.crt").write_text(value)
        value = str(tmp_path / "ca.crt")
    server = api.url.replace("http://", "https://")
    path = _kubeconfig(tmp_path / "kc", {"server": server, how: value})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path), f"clusters[fake].cluster.{how}")
    assert out.requests == [], out.describe()


def test_a_client_key_that_does_not_load_is_a_kubeconfig_error(api, kdist, tmp_path):
    """Not "cluster unreachable" at the handshake; and the key is not quoted."""
    junk = base64.b64encode(f"not a key {SECRET}".encode()).decode()
    path = _kubeconfig(tmp_path / "kc", {"server": api.url.replace("http://", "https://")},
                       {"client-certificate-data": junk, "client-key-data": junk})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path), "users[fake].user.client-certificate")
    assert SECRET not in _printed(out), out.describe()
    assert out.requests == [], out.describe()


# ---- secrets never printed ------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("failure", ["html", "401", "refused", "not-http"])
def test_a_server_urls_password_is_never_printed(api, kdist, tmp_path, failure):
    port = _other_port(api) if failure != "refused" else str(_closed_port())
    scheme = "ftp" if failure == "not-http" else "http"
    if failure == "html":
        api.html()
    elif failure == "401":
        api.fail(401, "Unauthorized", "Unauthorized")
    path = _kubeconfig(tmp_path / "kc", {"server": f"{scheme}://kdist:{SECRET}@127.0.0.1:{port}"})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2 if failure == "not-http" else 3, "127.0.0.1")
    assert SECRET not in _printed(out), out.describe()


EXEC_API = "client.authentication.k8s.io/v1"


@pytest.mark.parametrize("how,bad", [
    ("token", f"abc\n{SECRET}"),
    ("token", f"abc\r\n {SECRET}"),
    ("token", f"{SECRET}\x01"),
    ("tokenFile", f"abc\n{SECRET}\n"),
    ("exec", f"abc\n{SECRET}"),
])
def test_a_token_no_http_header_can_carry_is_refused_unprinted(api, kdist, tmp_path, how, bad):
    """A line break would end the header early (a traceback that printed the token); kdist
    names the field, not the token."""
    if how == "tokenFile":
        (tmp_path / "token").write_text(bad)
        user: dict[str, Any] = {"tokenFile": str(tmp_path / "token")}
    elif how == "exec":
        credential = json.dumps({"apiVersion": EXEC_API, "kind": "ExecCredential",
                                 "status": {"token": bad}})
        cmd = kubeconfigs.plugin(tmp_path / "login", f"cat <<'EOF'\n{credential}\nEOF\n")
        user = {"exec": {"apiVersion": EXEC_API, "command": str(cmd)}}
    else:
        user = {"token": bad}
    path = _kubeconfig(tmp_path / "kc", {"server": api.url}, user)
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path), f"users[fake].user.{how}")
    assert SECRET not in _printed(out), out.describe()
    assert out.requests == [], out.describe()


def test_a_refused_connection_is_unreachable_not_slow(api, kdist, tmp_path):
    """urllib3 2 makes a refused connection a TimeoutError: not "did not answer within 15s
    (set --request-timeout)", which sends the user after the wrong knob."""
    path = _kubeconfig(tmp_path / "kc", {"server": f"http://127.0.0.1:{_closed_port()}"})
    out = kdist("list", kubeconfig=path)
    line = error_line(out, 3, "unreachable", "127.0.0.1")
    assert "request-timeout" not in line, out.describe()
