"""Which proxy, if any, carries the requests (and the token) to the API server.

kdist decides this itself, by kubectl's rules (client-go, on Go's
golang.org/x/net/http/httpproxy), rather than leave it to the official client,
whose Configuration reads HTTP(S)_PROXY and ALL_PROXY through Python's
getproxies() and proxies even a loopback server, and whose urllib3 pool drops a
proxy URL's user:password:

- the kubeconfig cluster's ``proxy-url`` when it has one (http or https; NO_PROXY
  does not apply to it);
- else HTTPS_PROXY (https_proxy) for an https server, HTTP_PROXY (http_proxy) for
  an http one, the upper-case name first; ALL_PROXY is not read;
- never from the environment for a loopback server (localhost, 127.0.0.0/8, ::1)
  nor one NO_PROXY (no_proxy) names: a comma list of ``*``, CIDRs, IPs and
  domains, each optionally with ``:port``; ``example.com`` and ``.example.com``
  and ``*.example.com`` match the subdomains, the first also the name itself.

A SOCKS proxy is refused with a clear message (urllib3 needs PySocks for it).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from kdist.shared.errors import UsageError

ENV = {"https": ("HTTPS_PROXY", "https_proxy"), "http": ("HTTP_PROXY", "http_proxy")}
NO_PROXY = ("NO_PROXY", "no_proxy")
DEFAULT_PORTS = {"http": 80, "https": 443}

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Proxy:
    """A proxy to go through: its URL without user:password, and the header those make."""

    url: str
    authorization: str | None = None  # the Proxy-Authorization header's value

    def headers(self) -> dict[str, str] | None:
        return {"Proxy-Authorization": self.authorization} if self.authorization else None


def choose(server: str, proxy_url: object, field: str, env: Mapping[str, str]) -> Proxy | None:
    """The proxy for requests to `server`: `proxy_url` (the kubeconfig's, named `field` in
    messages) when set, else the environment's; None to connect directly."""
    if proxy_url is not None and proxy_url != "":
        if not isinstance(proxy_url, str):
            raise UsageError(f"{field}: must be a URL")
        return parse(proxy_url, field)
    parts = urlsplit(server)
    scheme = parts.scheme.lower()
    name, value = next(((n, env[n]) for n in ENV.get(scheme, ()) if env.get(n)), ("", ""))
    if not value:
        return None
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        return None  # no port kdist could connect to either: it says so then
    no_proxy = next((env[n] for n in NO_PROXY if env.get(n)), "")
    if not use_proxy(host, port, no_proxy):
        return None
    # Go reads a proxy without a scheme as http://.
    return parse(value if "://" in value else f"http://{value}", f"${name}")


def parse(url: str, field: str) -> Proxy:
    """`url` as a proxy kdist can use; UsageError naming `field` otherwise (never quoting
    the URL's password)."""
    from kdist.kube.errors import redacted

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise UsageError(f"{field}: {redacted(url)!r} is not a URL") from None
    scheme = parts.scheme.lower()
    if scheme.startswith("socks"):
        raise UsageError(f"{field}: {scheme} proxies are not supported by kdist (only http "
                         "and https ones); use an http(s) proxy, or none")
    if scheme not in DEFAULT_PORTS:
        raise UsageError(f"{field}: {redacted(url)!r} is not an http:// or https:// URL")
    if not host:
        raise UsageError(f"{field}: {redacted(url)!r} names no host")
    netloc = f"[{host}]" if ":" in host else host
    plain = f"{scheme}://{netloc}:{port or DEFAULT_PORTS[scheme]}"
    authorization = None
    if parts.username is not None:
        # As Go's transport does: the URL's user:password becomes Proxy-Authorization.
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(plain, authorization)


def use_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether an environment proxy applies to host:port (httpproxy's useProxy)."""
    ip = _ip(host)
    if host == "localhost" or (ip is not None and ip.is_loopback):
        return False
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return False
        if _matches(entry, host, port, ip):
            return False
    return True


def _matches(entry: str, host: str, port: int, ip: IP | None) -> bool:
    if "/" in entry:
        try:
            return ip is not None and ip in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    name, want_port = _split_port(entry)
    if want_port is not None and want_port != port:
        return False
    entry_ip = _ip(name)
    if entry_ip is not None:
        return ip is not None and entry_ip == ip
    if not name:
        return False
    if name.startswith("*."):
        name = name[1:]
    # "example.com" matches itself and its subdomains; ".example.com" the subdomains only.
    return host.endswith(name if name.startswith(".") else f".{name}") or host == name


def _split_port(entry: str) -> tuple[str, int | None]:
    """host, port of a NO_PROXY entry (an IPv6 address alone has colons but no port)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, _port(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(port)
    return entry, None


def _port(text: str) -> int | None:
    return int(text) if text.isdigit() else -1  # -1: a port that matches none


def _ip(host: str) -> IP | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # as Go's To4(): ::ffff:127.0.0.1 is loopback
    return ip
