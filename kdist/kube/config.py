"""Where to talk to: the kubeconfig (or in-cluster config), read once and bounded.

A kubeconfig is untrusted input like a spec: it is read as a regular file of
bounded size, its YAML bounded in nodes and depth (an alias bomb is refused),
and its context's namespace validated before anything is sent. Problems are
``UsageError`` (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdist.shared.errors import UsageError
from kdist.shared.names import namespace_problem

DEFAULT_KUBECONFIG = "~/.kube/config"
MAX_KUBECONFIG_BYTES = 4 << 20
#: Seconds one request may take, connection included, before the server counts as dead.
DEFAULT_REQUEST_TIMEOUT = 15.0
REQUEST_TIMEOUT_ENV = "KDIST_REQUEST_TIMEOUT"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ClusterOptions:
    """Where to talk to, as kubectl's global flags say (None = the kubeconfig's default)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    request_timeout: float | None = None

    def timeout(self) -> float:
        """The per-request deadline: the option, else $KDIST_REQUEST_TIMEOUT, else 15 s."""
        if self.request_timeout is not None:
            return self.request_timeout
        return parse_timeout(os.environ.get(REQUEST_TIMEOUT_ENV), REQUEST_TIMEOUT_ENV) \
            or DEFAULT_REQUEST_TIMEOUT


def parse_timeout(text: str | None, what: str) -> float | None:
    """A positive, finite number of seconds (at most a day), or None when unset."""
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number of seconds") from None
    if not (0 < value <= 86400):  # also refuses nan and inf
        raise UsageError(f"{what}: {text!r} must be more than 0 and at most 86400 seconds")
    return value


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
            check_namespace(opts.namespace, "-n/--namespace")
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
            raise UsageError(f"{path}: no kubeconfig (give --kubeconfig or set KUBECONFIG)")
        docs = [_read(p) for p in existing]
        doc = docs[0] if len(docs) == 1 else _merge(docs)
        namespace = _context_namespace(doc, opts.context, path)
        if namespace is not None:
            check_namespace(namespace, f"{path}: the context's namespace")
        return cls(path=path, in_cluster=False, namespace=namespace, _doc=doc, _opts=opts)

    @classmethod
    def _in_cluster(cls, opts: ClusterOptions) -> KubeConfig:
        ns_file = SA_DIR / "namespace"
        namespace = ns_file.read_text().strip() if ns_file.is_file() else None
        if namespace:
            check_namespace(namespace, str(ns_file))
        return cls(path="(in-cluster)", in_cluster=True, namespace=namespace or None, _opts=opts)

    def configuration(self) -> Any:
        """A `kubernetes.client.Configuration` for this context (server, TLS, credentials)."""
        from kdist.kube.official import pieces

        configuration, config, _ = pieces()
        cfg = configuration()
        try:
            if self.in_cluster:
                config.load_incluster_config(client_configuration=cfg)
            else:
                config.load_kube_config_from_dict(
                    self._doc, context=self._opts.context, client_configuration=cfg,
                    persist_config=False)
        except Exception as e:  # ConfigException, OSError, bad base64, exec plugin failures...
            raise UsageError(f"{self.path}: cannot use this kubeconfig: "
                             f"{' '.join(str(e).split())}") from None
        if not str(cfg.host or "").startswith(("https://", "http://")):
            raise UsageError(f"{self.path}: the cluster's server {cfg.host!r} is not an "
                             "http(s) URL")
        return cfg


def resolve_namespace(opts: ClusterOptions, job_namespace: str | None,
                      kubeconfig: KubeConfig | None) -> str:
    """-n, else the job's metadata.namespace, else the context's, else "default"."""
    return (opts.namespace or job_namespace
            or (kubeconfig.namespace if kubeconfig else None) or "default")


def _read(path: str) -> dict[str, Any]:
    from kdist.spec.load import read_bounded
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
        raise UsageError(f"{path}: no current-context (give --context)")
    for entry in doc.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            ctx = entry.get("context") or {}
            ns = ctx.get("namespace") if isinstance(ctx, dict) else None
            if ns is not None and not isinstance(ns, str):
                raise UsageError(f"{path}: context {name!r}: namespace must be a string")
            return ns or None
    raise UsageError(f"{path}: no context named {name!r}")
