"""Where to talk to: the kubeconfig (or in-cluster config), read once and bounded.

A kubeconfig is untrusted input like a spec: it is read as a regular file of
bounded size, its YAML bounded in nodes and depth (an alias bomb is refused),
and its context's namespace validated before anything is sent. What it trusts and
sends is checked as kubectl checks it (`kdist.kube.connect.trust`: the CA, the client
certificate, the token), and kdist, not the official client, picks the proxy
(`kdist.kube.connect.proxy`). Problems are ``UsageError`` (exit 2), naming the field.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdist.kube.connect import execplugin
from kdist.kube.errors import redacted
from kdist.shared.errors import ClusterError, UsageError
from kdist.shared.names import namespace_problem
from kdist.shared.spelling import option

# The target (kubectl's global flags) is stdlib only, for the CLI to build without this module.
from kdist.shared.target import (  # noqa: F401 (the names were here first)
    DEFAULT_REQUEST_TIMEOUT,
    REQUEST_TIMEOUT_ENV,
    ClusterOptions,
    parse_timeout,
)

DEFAULT_KUBECONFIG = "~/.kube/config"
MAX_KUBECONFIG_BYTES = 4 << 20
MAX_TOKEN_BYTES = 1 << 20  # a bearer token file (a service account's is about 1 KiB)
# The file fields of a kubeconfig: (section, entry key, field); kubectl reads a relative
# path from the directory of the file that sets it.
_FILE_FIELDS = (("clusters", "cluster", "certificate-authority"),
                ("users", "user", "client-certificate"), ("users", "user", "client-key"),
                ("users", "user", "tokenFile"))
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def check_namespace(namespace: str, where: str) -> str:
    problem = namespace_problem(namespace)
    if problem:
        raise UsageError(f"{where}: {problem}")
    return namespace


@dataclass
class KubeConfig:
    """The chosen context of a kubeconfig (or the pod's own service account)."""

    path: str
    in_cluster: bool
    namespace: str | None
    _doc: dict[str, Any] | None = field(default=None, repr=False)
    _opts: ClusterOptions = field(default_factory=ClusterOptions, repr=False)

    @classmethod
    def load(cls, opts: ClusterOptions, *, missing_ok: bool = False) -> KubeConfig | None:
        """Read the kubeconfig once; None only when `missing_ok` and there is none."""
        if opts.namespace is not None:
            check_namespace(opts.namespace, option("namespace"))
        path = opts.kubeconfig or os.environ.get("KUBECONFIG") or \
            os.path.expanduser(DEFAULT_KUBECONFIG)
        files = [p for p in path.split(os.pathsep) if p]
        existing = [p for p in files if os.path.lexists(p)]
        if not existing:
            if not opts.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
                return cls._in_cluster(opts)
            if missing_ok and not opts.kubeconfig:
                return None
            if opts.kubeconfig:
                raise UsageError(f"{path}: kubeconfig not found")
            raise UsageError(f"{path}: no kubeconfig (give {option('kubeconfig')} or set "
                             "KUBECONFIG)")
        docs = [_anchored(_read(p), p) for p in existing]
        doc = docs[0] if len(docs) == 1 else _merge(docs)
        namespace = _context_namespace(doc, opts.context, path)
        if namespace is not None:
            check_namespace(namespace, f"{path}: the context's namespace")
        return cls(path=path, in_cluster=False, namespace=namespace, _doc=doc, _opts=opts)

    @property
    def context(self) -> str:
        """The context in use: --context, else the kubeconfig's current-context."""
        if self.in_cluster:
            return "(in-cluster service account)"
        return str(self._opts.context or (self._doc or {}).get("current-context") or "")

    @classmethod
    def _in_cluster(cls, opts: ClusterOptions) -> KubeConfig:
        ns_file = SA_DIR / "namespace"
        namespace = ns_file.read_text().strip() if ns_file.is_file() else None
        if namespace:
            check_namespace(namespace, str(ns_file))
        return cls(path="(in-cluster)", in_cluster=True, namespace=namespace or None, _opts=opts)

    def configuration(self) -> Any:
        """A `kubernetes.client.Configuration` for this context (server, TLS, credentials,
        proxy); UsageError for a kubeconfig kubectl would refuse, before anything is sent."""
        from kdist.kube.connect.official import pieces

        configuration, config, _ = pieces()
        cfg = configuration()
        picked = _Picked(self.path)
        try:
            if self.in_cluster:
                config.load_incluster_config(client_configuration=cfg)
            else:
                doc, picked = _files_checked(self._doc or {}, self._opts.context, self.path)
                picked.check_cluster()
                execplugin.check(picked.user, lambda name: picked.named("users", name))
                with _plugin_errors() as said:
                    config.load_kube_config_from_dict(
                        doc, context=self._opts.context, client_configuration=cfg,
                        persist_config=False)
                execplugin.check_started(picked.user, said.unstarted,
                                         lambda name: picked.named("users", name))
        except UsageError:
            raise
        except Exception as e:  # ConfigException, OSError, bad base64...
            raise UsageError(f"{self.path}: cannot use this kubeconfig: "
                             f"{' '.join(str(e).split())}") from None
        if isinstance(picked.user.get("exec"), dict) and not (
                cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
                or cfg.cert_file):
            # The official loader logs a failed plugin and goes on without credentials.
            command = picked.user["exec"].get("command")
            why = " ".join(" ".join(said).split())[:500] or "it gave no token nor certificate"
            raise ClusterError(f"{self.path}: the credential plugin {command!r} failed: {why}")
        if not str(cfg.host or "").startswith(("https://", "http://")):
            raise UsageError(f"{self.path}: the cluster's server {redacted(str(cfg.host))!r} "
                             "is not an http(s) URL")
        picked.check_credentials(cfg, SA_DIR / "token" if self.in_cluster else None)
        _set_proxy(cfg, picked)
        return cfg


def resolve_namespace(opts: ClusterOptions, job_namespace: str | None,
                      kubeconfig: KubeConfig | None) -> str:
    """-n, else the job's metadata.namespace, else the context's, else "default"."""
    return (opts.namespace or job_namespace
            or (kubeconfig.namespace if kubeconfig else None) or "default")


def _read(path: str) -> dict[str, Any]:
    from kdist.shared.readfile import read_bounded
    from kdist.spec.yamlsafe import YamlProblem, load_document

    try:
        data = read_bounded(path, MAX_KUBECONFIG_BYTES)
        doc = load_document(data, max_bytes=MAX_KUBECONFIG_BYTES)
    except OSError as e:
        raise UsageError(f"{path}: cannot read the kubeconfig: {e.strerror or e}") from None
    except (ValueError, YamlProblem) as e:
        raise UsageError(f"{path}: not a usable kubeconfig: {e}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a usable kubeconfig: expected a mapping")
    return doc


def _merge(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """KUBECONFIG=a:b as kubectl merges it: the first file to set a name or a field wins."""
    merged: dict[str, Any] = {}
    for doc in docs:
        for key in ("clusters", "contexts", "users"):
            have = {i.get("name") for i in merged.get(key, []) if isinstance(i, dict)}
            merged.setdefault(key, []).extend(
                i for i in doc.get(key) or [] if isinstance(i, dict) and i.get("name") not in have)
        for key, value in doc.items():
            if key not in ("clusters", "contexts", "users"):
                merged.setdefault(key, value)
    return merged


def _context_namespace(doc: dict[str, Any], context: str | None, path: str) -> str | None:
    name = context or doc.get("current-context")
    if not name:
        raise UsageError(f"{path}: no current-context (give {option('context')})")
    for entry in doc.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            ctx = entry.get("context") or {}
            ns = ctx.get("namespace") if isinstance(ctx, dict) else None
            if ns is not None and not isinstance(ns, str):
                raise UsageError(f"{path}: context {name!r}: namespace must be a string")
            return ns or None
    raise UsageError(f"{path}: no context named {name!r}")


def _anchored(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """`doc` with its relative file fields made absolute, from `path`'s directory."""
    base = os.path.dirname(os.path.abspath(path))
    for section, key, name in _FILE_FIELDS:
        for entry in doc.get(section) or []:
            inner = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(inner, dict):
                continue
            value = inner.get(name)
            if isinstance(value, str) and value and not os.path.isabs(value):
                inner[name] = os.path.join(base, value)
    execplugin.anchor(doc, base)
    return doc


@dataclass
class _Picked:
    """The context's cluster and user entries, named in messages as kubectl's paths are
    (`clusters[NAME].cluster.FIELD`)."""

    path: str
    cluster_name: object = None
    cluster: dict[str, Any] = field(default_factory=dict)
    user_name: object = None
    user: dict[str, Any] = field(default_factory=dict)  # as written (tokenFile not read)

    def named(self, section: str, name: str) -> str:
        entry = self.cluster_name if section == "clusters" else self.user_name
        shown = entry if isinstance(entry, str) and entry.isprintable() and "]" not in entry \
            else json.dumps(entry)
        return f"{self.path}: {section}[{shown}].{section[:-1]}.{name}"

    def check_cluster(self) -> None:
        """A CA kubectl would refuse, or a proxy-url kdist cannot use: before any plugin runs
        or anything is sent."""
        from kdist.kube.connect import proxy, trust

        trust.check_cluster(self.cluster, lambda name: self.named("clusters", name))
        url = self.cluster.get("proxy-url")
        if url is not None and url != "":
            proxy.choose("", url, self.named("clusters", "proxy-url"), {})

    def check_credentials(self, cfg: Any, token_file: Path | None) -> None:
        """The token an HTTP header can carry, the client certificate a pair that loads;
        messages name the field, never the token."""
        from kdist.kube.connect import trust

        token = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization") or ""
        trust.check_token(token, str(token_file or self._token_field()))
        client = "client-certificate" if any(
            self.user.get(k) for k in ("client-certificate", "client-certificate-data")) \
            else "exec"
        trust.check_client_pair(cfg.cert_file, cfg.key_file, self.named("users", client))

    def _token_field(self) -> str:
        """Where the token came from, in the loader's order of preference."""
        for name in ("auth-provider", "token", "tokenFile", "exec"):
            if self.user.get(name):
                file = f" {self.user[name]}" if name == "tokenFile" else ""
                return self.named("users", name) + file
        return self.named("users", "token")


def _set_proxy(cfg: Any, picked: _Picked) -> None:
    """kdist's choice of proxy (kdist.kube.connect.proxy), not the official client's own."""
    from kdist.kube.connect import proxy

    chosen = proxy.choose(str(cfg.host), picked.cluster.get("proxy-url"),
                          picked.named("clusters", "proxy-url"), os.environ)
    cfg.proxy = chosen.url if chosen else None
    cfg.no_proxy = None
    cfg.proxy_headers = chosen.headers() if chosen else None


def _files_checked(doc: dict[str, Any], context: str | None,
                   path: str) -> tuple[dict[str, Any], _Picked]:
    """The kubeconfig with the chosen user's tokenFile read (bounded, a regular file only)
    as its token, and the chosen entries; UsageError for a file field that names a FIFO, a
    device or a directory (the official loader would block on it, or send no token)."""
    name = context or doc.get("current-context")
    ctx = next((e.get("context") for e in doc.get("contexts") or []
                if isinstance(e, dict) and e.get("name") == name), None) or {}
    chosen = {"clusters": ctx.get("cluster"), "users": ctx.get("user")} \
        if isinstance(ctx, dict) else {}
    picked = _Picked(path, chosen.get("clusters"), {}, chosen.get("users"), {})
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in doc.get(section) or []:
            inner = entry.get(key) if isinstance(entry, dict) else None
            if isinstance(inner, dict) and entry.get("name") == chosen.get(section):
                setattr(picked, key, inner)
    for section, key, field_name in _FILE_FIELDS:
        value = getattr(picked, key).get(field_name)
        if isinstance(value, str) and value:
            _check_file(value, f"{path}: {key} {chosen.get(section)!r}: {field_name}")
    user = picked.user
    token_file = user.get("tokenFile")
    if isinstance(token_file, str) and token_file and "token" not in user:
        from kdist.kube.connect.trust import read_capped

        where = f"{picked.named('users', 'tokenFile')} {token_file}"
        data = read_capped(token_file, MAX_TOKEN_BYTES, where)
        try:
            token = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise UsageError(f"{where}: not UTF-8 text") from None
        user = {k: v for k, v in user.items() if k != "tokenFile"} | {"token": token}
        doc = _with_user(doc, str(chosen["users"]), user)
    return doc, picked


def _check_file(value: str, where: str) -> None:
    try:
        mode = os.stat(value).st_mode
    except OSError:
        return  # missing: the loader says so in its words
    if not stat.S_ISREG(mode):
        raise UsageError(f"{where} {value} is not a regular file (a FIFO, socket, device "
                         "or directory?)")


def _with_user(doc: dict[str, Any], name: str, user: dict[str, Any]) -> dict[str, Any]:
    users = [dict(e, user=user) if isinstance(e, dict) and e.get("name") == name else e
             for e in doc.get("users") or []]
    return dict(doc, users=users)


class _Said(list[str]):
    """What the official loader logged, and the error that kept the plugin from starting
    (None when it started, or none was run)."""

    unstarted: OSError | None = None


@contextmanager
def _plugin_errors() -> Iterator[_Said]:
    """What the official loader logs while it loads (a failed exec plugin's words), kept
    instead of printed."""
    said = _Said()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())
            # The loader logs inside its `except`: the exception is the one handled now.
            error = sys.exc_info()[1]
            if isinstance(error, OSError) and execplugin.from_start(error):
                said.unstarted = error

    handler, root = Keep(logging.ERROR), logging.getLogger()
    root.addHandler(handler)
    try:
        yield said
    finally:
        root.removeHandler(handler)
