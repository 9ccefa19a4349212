"""Whom a kubeconfig trusts and what it sends: its CA, its client certificate, its token.

Checked when the kubeconfig is loaded, as kubectl (client-go) checks them, so that a
wrong field is a kubeconfig error naming that field (exit 2) rather than "cluster
unreachable" at the first request, or a token sent where it should not go:

- a CA together with ``insecure-skip-tls-verify: true`` is refused (client-go: "specifying
  a root certificates file with the insecure flag is not allowed"): with verification off
  the CA checks nothing, and the bearer token goes to whichever server answers;
- the CA must be PEM certificates (client-go reads nothing else), the client certificate
  and key a pair that loads;
- a token must be something an HTTP header can carry: a line break would end the header
  (http.client refuses it with a traceback that prints the token). No message here
  ever quotes the token or the key.
"""

from __future__ import annotations

import base64
import binascii
import ssl
from collections.abc import Callable
from typing import Any

from kdist.shared.errors import UsageError

MAX_CA_BYTES = 4 << 20  # a system CA bundle is about 200 KiB

#: Names a field of the kubeconfig's chosen cluster or user in a message.
Field = Callable[[str], str]


def check_cluster(cluster: dict[str, Any], field: Field) -> None:
    """UsageError for a CA beside insecure-skip-tls-verify, or a CA that is no certificate."""
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        # The official loader would take the string "false" as true (verification off).
        raise UsageError(f"{field('insecure-skip-tls-verify')}: must be true or false, "
                         f"not {insecure!r}")
    data, path = cluster.get("certificate-authority-data"), cluster.get("certificate-authority")
    if insecure and (data or path):
        raise UsageError(
            f"{field('insecure-skip-tls-verify')}: true beside a certificate-authority is not "
            "allowed (as in kubectl): with verification off the CA checks nothing and the "
            "token goes to any server; remove one of them")
    if data:
        _check_ca(_decoded(data, field("certificate-authority-data")),
                  field("certificate-authority-data"))
    elif path:
        if not isinstance(path, str):
            raise UsageError(f"{field('certificate-authority')}: must be a file name")
        where = f"{field('certificate-authority')} {path}"
        _check_ca(_read_ca(path, where), where)


def _decoded(data: object, where: str) -> bytes:
    if not isinstance(data, str):
        raise UsageError(f"{where}: must be a base64 string")
    try:
        return base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{where}: not base64") from None


def _read_ca(path: str, where: str) -> bytes:
    return read_capped(path, MAX_CA_BYTES, where)


def read_capped(path: str, cap: int, where: str) -> bytes:
    """A kubeconfig's file (a CA, a token file), read bounded: a UsageError naming `where`
    when it cannot be read or is larger than `cap` bytes."""
    from kdist.shared.readfile import read_bounded

    try:
        data = read_bounded(path, cap)
    except (OSError, ValueError) as e:
        raise UsageError(f"{where}: {getattr(e, 'strerror', None) or e}") from None
    if len(data) > cap:
        raise UsageError(f"{where}: larger than {cap >> 20} MiB")
    return data


def _check_ca(pem: bytes, where: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=pem.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        raise UsageError(f"{where}: no PEM certificate in it (a certificate-authority is "
                         "the PEM text of the cluster's CA certificates)") from None


def check_client_pair(cert_file: str | None, key_file: str | None, where: str) -> None:
    """UsageError when the user's client certificate and key do not load as a pair (bad
    PEM, a key that is not the certificate's, an encrypted key: kubectl cannot ask for
    its passphrase either, and OpenSSL would prompt on the terminal)."""
    if not cert_file:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    except (ssl.SSLError, ValueError, TypeError):
        raise UsageError(f"{where}: the client certificate and key are not a PEM "
                         "certificate and its unencrypted private key") from None
    except OSError as e:
        raise UsageError(f"{where}: {e.strerror or e}") from None


def _no_passphrase() -> bytes:
    raise ValueError("an encrypted client key")


def check_token(token: str, where: str) -> None:
    """UsageError naming `where` (never the token) when no HTTP header can carry `token`."""
    problem = token_problem(token)
    if problem:
        raise UsageError(f"{where}: {problem} (no HTTP header can carry it)")


def token_problem(token: str) -> str | None:
    """Why `token` cannot be an HTTP header's value (None when it can), without quoting it.

    A header carries printable ASCII and tabs (RFC 9110; client-go refuses control
    characters, http.client non-Latin-1 ones).
    """
    for char in token:
        if char == "\t" or " " <= char <= "~":
            continue
        if char in "\r\n":
            return "the token has a line break in it"
        return ("the token has a control character in it" if ord(char) < 0x80
                else "the token has a non-ASCII character in it")
    return None
