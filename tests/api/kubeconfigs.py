"""Kubeconfig files for the fake API tier: a good one, and the hostile ones.

The hostile ones are what a user could be handed (or a tool could write):
a YAML alias bomb, a 50 MB file, a FIFO. kdist must refuse each quickly with
exit 2, as its spec reader does for job files.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.api.fakeapi import CertPair

TOKEN = "fake-token"


def kubeconfig_text(server: str, *, namespace: str | None = "default", token: str = TOKEN,
                    ca: Path | None = None) -> str:
    """A one-cluster, one-user, one-context kubeconfig (context "fake")."""
    if ca is not None:
        ca_data = base64.b64encode(ca.read_bytes()).decode()
        cluster = f"{{server: '{server}', certificate-authority-data: '{ca_data}'}}"
    else:
        cluster = f"{{server: '{server}'}}"
    ns = "" if namespace is None else f", namespace: {_quoted(namespace)}"
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {cluster}}}]\n"
        f"users: [{{name: fake, user: {{token: '{token}'}}}}]\n"
        f"contexts: [{{name: fake, context: {{cluster: fake, user: fake{ns}}}}}]\n"
        "current-context: fake\n"
    )


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar (escapes included), so any namespace string survives."""
    return json.dumps(value)


def with_user(path: Path, server: str, user: dict[str, object]) -> Path:
    """A kubeconfig whose one user is `user` (tokenFile, exec, client-key, ...), as JSON
    (which YAML reads)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                  "namespace": "default"}}]}))
    return path


def plugin(path: Path, script: str) -> Path:
    """An exec credential plugin: a shell script (ExecCredential on stdout when it works)."""
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def write_kubeconfig(path: Path, server: str, **kwargs: object) -> Path:
    path.write_text(kubeconfig_text(server, **kwargs))  # type: ignore[arg-type]
    return path


def alias_bomb(path: Path, server: str) -> Path:
    """A valid kubeconfig plus a billion-laughs `preferences` (9 levels of 9 aliases: 9^9
    leaves when expanded; a few hundred bytes on disk)."""
    lines = ['preferences:', '  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*l{i - 1}"] * 9)
        lines.append(f"  l{i}: &l{i} [{refs}]")
    path.write_text(kubeconfig_text(server) + "\n".join(lines) + "\n")
    return path


def huge(path: Path, server: str, megabytes: int = 50) -> Path:
    """A valid kubeconfig made `megabytes` large by one long string (a client cert's size,
    a thousand times over)."""
    filler = "A" * (megabytes << 20)
    path.write_text(kubeconfig_text(server) + f"preferences: {{blob: '{filler}'}}\n")
    return path


def fifo(path: Path) -> Path:
    """A named pipe nobody writes to: opening it for reading blocks forever."""
    os.mkfifo(path)
    return path


def self_signed(directory: Path) -> CertPair | None:
    """A certificate for 127.0.0.1 made with the openssl CLI; None when it is not installed."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60)
    return CertPair(cert, key)
