"""The connection's rules without a connection (issue 37): which proxy kubectl would use
(golang.org/x/net/http/httpproxy, as client-go applies it), what a printed URL hides, which
tokens a header can carry, which cluster TLS settings are refused."""

from __future__ import annotations

import base64

import pytest

from kdist.kube.connect import proxy, trust
from kdist.kube.errors import redacted
from kdist.shared.errors import UsageError

P = "http://proxy.corp:3128"


def _choose(server: str, env: dict[str, str], proxy_url: object = None) -> str | None:
    chosen = proxy.choose(server, proxy_url, "proxy-url", env)
    return chosen.url if chosen else None


@pytest.mark.parametrize("server", [
    "https://127.0.0.1:6443", "https://127.9.8.7", "https://localhost:6443",
    "https://LOCALHOST", "https://[::1]:6443", "https://[::ffff:127.0.0.1]:6443"])
def test_an_env_proxy_never_carries_loopback(server):
    assert _choose(server, {"HTTPS_PROXY": P}) is None


@pytest.mark.parametrize("no_proxy,server,direct", [
    ("10.0.0.0/8", "https://10.96.0.1", True),
    ("10.0.0.0/8", "https://11.0.0.1", False),
    ("fd00::/8", "https://[fd00::1]:6443", True),
    ("10.96.0.1", "https://10.96.0.1", True),
    ("10.96.0.1:443", "https://10.96.0.1", True),  # the default port counts
    ("10.96.0.1:6443", "https://10.96.0.1", False),
    ("example.com", "https://example.com", True),
    ("example.com", "https://api.example.com", True),
    ("example.com", "https://notexample.com", False),
    (".example.com", "https://example.com", False),  # subdomains only
    (".example.com", "https://api.example.com", True),
    ("*.example.com", "https://api.example.com", True),
    ("*.example.com", "https://example.com", False),
    ("EXAMPLE.com:6443", "https://api.example.com:6443", True),
    ("example.com:6443", "https://api.example.com", False),
    (" other.org , example.com ", "https://api.example.com", True),
    ("*", "https://anything.anywhere", True),
    ("", "https://api.example.com", False),
])
def test_no_proxy_entries(no_proxy, server, direct):
    got = _choose(server, {"HTTPS_PROXY": P, "NO_PROXY": no_proxy})
    assert got == (None if direct else P)


@pytest.mark.parametrize("env,server,want", [
    ({"HTTPS_PROXY": P}, "https://api.example.com", P),
    ({"https_proxy": P}, "https://api.example.com", P),
    ({"HTTPS_PROXY": P, "https_proxy": "http://lower:1"}, "https://a.example.com", P),
    ({"HTTPS_PROXY": "", "https_proxy": P}, "https://a.example.com", P),  # empty is unset
    ({"HTTP_PROXY": P}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P}, "http://api.example.com", None),
    ({"ALL_PROXY": P, "all_proxy": P}, "https://api.example.com", None),
    ({"HTTPS_PROXY": "proxy.corp:3128"}, "https://api.example.com", P),  # http:// assumed
    ({"HTTPS_PROXY": "https://proxy.corp"}, "https://api.example.com", "https://proxy.corp:443"),
    ({"HTTPS_PROXY": P, "no_proxy": "example.com"}, "https://api.example.com", None),
    ({"HTTPS_PROXY": P, "NO_PROXY": "other.org", "no_proxy": "example.com"},
     "https://api.example.com", P),  # NO_PROXY first, as Go reads them
])
def test_which_env_variable(env, server, want):
    assert _choose(server, env) == want


def test_a_kubeconfig_proxy_url_wins_everywhere():
    """client-go's http.ProxyURL: NO_PROXY and loopback do not apply to it."""
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    assert _choose("https://127.0.0.1:6443", env, P) == P
    assert _choose("https://127.0.0.1:6443", env, "") is None  # empty: the env's rules


def test_a_proxys_credentials_become_a_header_and_leave_the_url():
    chosen = proxy.choose("https://api.example.com", "http://me:p%40ss@proxy.corp:3128",
                          "proxy-url", {})
    assert chosen is not None and chosen.url == P
    assert chosen.headers() == {
        "Proxy-Authorization": "Basic " + base64.b64encode(b"me:p@ss").decode()}


@pytest.mark.parametrize("value,said", [
    ("socks5://proxy.corp:1080", "socks5"), ("socks5h://u:pw@proxy.corp:1080", "socks5h"),
    ("ftp://u:pw@proxy.corp", "ftp://***@proxy.corp"), ("http://", "no host"),
    ("http://proxy.corp:99999", "not a URL"), (["a"], "must be a URL"),
])
def test_a_proxy_kdist_cannot_use_is_refused(value, said):
    with pytest.raises(UsageError) as e:
        proxy.choose("https://api.example.com", value, "proxy-url", {})
    assert said in str(e.value) and "pw" not in str(e.value)


def test_an_env_socks_proxy_is_refused_naming_the_variable_only_when_used():
    env = {"HTTPS_PROXY": "socks5://u:pw@proxy.corp:1080"}
    assert _choose("https://127.0.0.1", env) is None
    with pytest.raises(UsageError, match=r"\$HTTPS_PROXY: socks5"):
        _choose("https://api.example.com", env)


@pytest.mark.parametrize("url,shown", [
    ("https://user:pw@host:6443/x", "https://***@host:6443/x"),
    ("https://tok@host", "https://***@host"),
    ("https://u:p@ss@host/a@b", "https://***@host/a@b"),
    ("u:pw@proxy:3128", "***@proxy:3128"),
    ("https://host:6443/a@b?c=@", "https://host:6443/a@b?c=@"),
])
def test_a_printed_url_hides_its_userinfo(url, shown):
    assert redacted(url) == shown


@pytest.mark.parametrize("token,ok", [
    ("eyJhbGciOi.abc-_~+/=", True), ("with\ttab", True), ("a\nb", False), ("a\rb", False),
    ("a\x00b", False), ("a\x7fb", False), ("a\u20acb", False),
])
def test_which_tokens_a_header_carries(token, ok):
    problem = trust.token_problem(token)
    assert (problem is None) is ok
    assert problem is None or token not in problem


def _field(name: str) -> str:
    return f"clusters[x].cluster.{name}"


@pytest.mark.parametrize("cluster,said", [
    ({"insecure-skip-tls-verify": "false"}, "must be true or false"),
    ({"insecure-skip-tls-verify": True, "certificate-authority": "/x"}, "not allowed"),
    ({"insecure-skip-tls-verify": True, "certificate-authority-data": "AAAA"}, "not allowed"),
    ({"certificate-authority-data": 5}, "base64"),
    ({"certificate-authority": ["a"]}, "file name"),
    ({"certificate-authority": "/nonexistent/ca.crt"}, "/nonexistent/ca.crt"),
])
def test_cluster_tls_settings_kubectl_refuses(cluster, said):
    with pytest.raises(UsageError) as e:
        trust.check_cluster(cluster, _field)
    assert said in str(e.value) and "clusters[x].cluster." in str(e.value)


def test_insecure_alone_and_no_ca_pass():
    trust.check_cluster({"insecure-skip-tls-verify": True}, _field)
    trust.check_cluster({"insecure-skip-tls-verify": False}, _field)
    trust.check_cluster({}, _field)
