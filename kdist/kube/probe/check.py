"""`kdist check`: what a first submit needs of the cluster, one verdict each, with its fix.

In order: the kubeconfig and context, the connection (refused, no such host, TLS,
timeout: `errors.Unreachable.why`), the credentials, the namespace, then one
SelfSubjectAccessReview per verb of kdist's own Role (`rendering.addons.RULES`,
the one list of what kdist does), then what the cluster serves
(`kdist.kube.probe.features`). A failed kubeconfig, connection or credentials line
ends the run: every later line is "skipped", as nothing after it could be asked.
Nothing is created: the reviews are answered, never stored, and every probe
object is sent with dryRun=All.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kdist.kube import kinds
from kdist.kube.connect.config import ClusterOptions, KubeConfig, resolve_namespace
from kdist.kube.errors import Unreachable, not_kubernetes
from kdist.kube.probe.features import OPERATED, features, served_features
from kdist.kube.probe.verdict import FAIL, OK, SKIPPED, UNKNOWN, Ask, Verdict, ask_raw, brief, dig
from kdist.rendering.addons import RULES
from kdist.shared.errors import KdistError
from kdist.shared.spelling import option

#: The checks after the connection, in order: named as "skipped" when it fails.
LATER = ("namespace", "access", *(b.name for b in OPERATED), "kueue", "gang",
         "restart rules")
#: Rules of kdist's Role asked about only where the cluster serves the resource.
_NEEDS = {**{k.plural: b.name for b in OPERATED for k in (b.kind, *b.created_first)},
          "workloads": "kueue"}
RBAC_FIX = ("an admin applies kdist's Role (manifests/rbac.yaml, namespace {ns}) and binds "
            "it to you: kubectl -n {ns} create rolebinding kdist-YOU --role kdist-submitter "
            "--user YOU")
_UNREACHABLE_FIX = {
    "refused": "nothing listens there: is the cluster up, and is the kubeconfig's server "
               "address (and port) right? (kubectl cluster-info)",
    "no such host": "the server's host name does not resolve: check the kubeconfig's server "
                    "address, and your VPN or DNS",
    "tls": "the server's certificate does not verify: the context's certificate-authority "
           "(-data) must be this cluster's CA, and the server address a name in its certificate",
    "proxy": "the proxy in between failed: check $HTTPS_PROXY/$NO_PROXY or the kubeconfig's "
             "proxy-url",
    "timeout": "no answer in time: check the network path (firewall, VPN), or give a slow "
               "server more with {request_timeout}",
}


def check(opts: ClusterOptions) -> list[Verdict]:
    """Every verdict for this target, in order (never raises a KdistError: each is a line)."""
    from kdist.kube.client import Cluster

    verdicts: list[Verdict] = []
    try:
        kubeconfig = KubeConfig.load(opts)
        assert kubeconfig is not None  # load() without missing_ok raises instead
        cfg = kubeconfig.configuration()
        ns = resolve_namespace(opts, None, kubeconfig)
    except KdistError as e:
        fix = (f"point {option('kubeconfig')} (or $KUBECONFIG) at your kubeconfig and "
               f"{option('context')} at one of its contexts (kubectl config get-contexts)")
        return [Verdict("kubeconfig", FAIL, str(e), fix), *_skipped("connection", "the "
                                                                    "kubeconfig")]
    cluster = Cluster(cfg, opts.timeout())
    verdicts.append(Verdict("kubeconfig", OK, f"{kubeconfig.path}, context "
                            f"{kubeconfig.context or '(none)'}, namespace {ns}"))

    def ask(method: str, path: str, body: Any = None, **query: str) -> tuple[int, dict]:
        return ask_raw(cluster, method, path, body, query)

    try:
        code, version = ask("GET", "/version")
    except KdistError as e:
        why = e.why if isinstance(e, Unreachable) else ""
        fix = _UNREACHABLE_FIX.get(why, "check the kubeconfig's server address").format(
            request_timeout=option("request_timeout"))
        return [*verdicts, Verdict("connection", FAIL, str(e), fix), *_skipped("the connection")]
    if code == 404:  # a wrong URL or a proxy: not eight FAILs of access after it
        error = not_kubernetes(cluster.server, code)
        return [*verdicts, Verdict("connection", FAIL, str(error),
                                   "point the kubeconfig's server at the API server "
                                   "(kubectl cluster-info shows it)"),
                *_skipped("the connection")]
    shown = f" (Kubernetes {version['gitVersion']})" if code == 200 and isinstance(
        version.get("gitVersion"), str) else ""
    verdicts.append(Verdict("connection", OK, f"{cluster.server} answers{shown}"))
    try:
        who = _credentials(ask, code)
        verdicts.append(who)
        if who.failed:
            return [*verdicts, *_skipped("the credentials")]
        verdicts.append(_namespace(ask, ns))
        served = served_features(cluster)
        for rule in RULES:
            wanted = _NEEDS.get(rule["resources"][0])
            # No review of what the cluster lacks (asked where discovery could not tell).
            if wanted is None or served[wanted] is not False:
                verdicts.append(_access(ask, ns, rule))
        verdicts += features(ask, ns, served)
    except KdistError as e:  # the server went away half-way: say so where it happened
        verdicts.append(Verdict("cluster", FAIL, str(e),
                                "try again; if it persists, the API server is failing"))
    return verdicts


def _skipped(after: str, *also: str) -> list[Verdict]:
    names = ([after] if also else []) + ["credentials", *LATER]
    cause = also[0] if also else after
    return [Verdict(name, SKIPPED, f"not checked: {cause} failed") for name in names]


def _credentials(ask: Ask, version_code: int) -> Verdict:
    """Who the server takes this user for (SelfSubjectReview, Kubernetes >= 1.28)."""
    review = {"apiVersion": kinds.SELF_REVIEW.api_version, "kind": kinds.SELF_REVIEW.kind}
    code, answer = ask("POST", kinds.SELF_REVIEW.collection(None), review)
    if code == 401 or (version_code == 401 and code >= 400):
        return Verdict("credentials", FAIL, "the API server refused the kubeconfig's "
                       "credentials (401 Unauthorized)",
                       "log in again or refresh the context's token, certificate or "
                       "credential plugin (kubectl auth whoami tells the same)")
    if code == 404:  # no SelfSubjectReview before Kubernetes 1.28 (or its API group off)
        return Verdict("credentials", UNKNOWN, "could not tell as whom: SelfSubjectReview "
                       "answered 404 (Kubernetes < 1.28?); the access lines below tell "
                       "what these credentials may do")
    if code >= 300:  # authenticated (else 401), but not told as whom
        return Verdict("credentials", OK if code == 403 else UNKNOWN,
                       f"{'accepted, ' if code == 403 else ''}but SelfSubjectReview answered "
                       f"{code}: not told as whom")
    user = dig(answer, "status", "userInfo", "username")
    if isinstance(user, str) and user:
        return Verdict("credentials", OK, f"accepted, as {user}")
    return Verdict("credentials", OK, "accepted (this server does not say as whom)")


def _namespace(ask: Ask, ns: str) -> Verdict:
    """Whether `ns` exists and its pods can be read. Without get on namespaces (a
    namespaced Role gives none), a dry-run create of a ConfigMap in it tells: the API
    server answers 404 for a namespace that is not there."""
    missing = Verdict("namespace", FAIL, f"namespace {ns} not found",
                      f"pass -n an existing namespace, or have it made (kubectl create "
                      f"namespace {ns}; manifests/namespace.yaml makes kdist-jobs)")
    code, _ = ask("GET", f"{kinds.NAMESPACE.collection(None)}/{quote(ns, safe='')}")
    if code == 404:
        return missing
    if code >= 300:
        probe = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "kdist-check", "namespace": ns}}
        code, answer = ask("POST", kinds.CONFIGMAP.collection(ns), probe, dryRun="All")
        if code == 404 and dig(answer, "details", "kind") == "namespaces":
            return missing
    seen = "exists" if code < 300 else "may exist (you may neither get it nor create in it)"
    code, _ = ask("GET", kinds.POD.collection(ns), limit="1")
    if code >= 300:
        return Verdict("namespace", FAIL, f"namespace {ns} {seen}, but listing its pods "
                       f"answered {code}", RBAC_FIX.format(ns=ns))
    return Verdict("namespace", OK if seen == "exists" else UNKNOWN,
                   f"namespace {ns} {seen}; its pods are readable")


def _access(ask: Ask, ns: str, rule: dict[str, Any]) -> Verdict:
    """One rule of kdist's Role: a SelfSubjectAccessReview per verb, in namespace `ns`."""
    group = rule["apiGroups"][0]
    resource, _, sub = rule["resources"][0].partition("/")
    ref = f"{resource}.{group}" if group else resource
    ref += f"/{sub}" if sub else ""
    denied: list[str] = []
    unknown: list[str] = []  # verbs whose review answer is misshapen: kdist cannot tell
    for verb in rule["verbs"]:
        attrs = {"namespace": ns, "verb": verb, "group": group, "resource": resource,
                 **({"subresource": sub} if sub else {})}
        review = {"apiVersion": kinds.ACCESS_REVIEW.api_version,
                  "kind": kinds.ACCESS_REVIEW.kind, "spec": {"resourceAttributes": attrs}}
        code, answer = ask("POST", kinds.ACCESS_REVIEW.collection(None), review)
        status = answer.get("status")
        allowed = status.get("allowed") if isinstance(status, dict) else None
        if code >= 300:
            denied.append(f"{verb} (the review answered {code})")
        elif not isinstance(allowed, bool):
            what = f"status.allowed is {brief(allowed)}" if isinstance(status, dict) else \
                f"status is {brief(status)}"
            unknown.append(f"{verb} (a malformed review answer: {what})")
        elif not allowed:
            denied.append(verb)
    if denied:
        return Verdict(f"access {ref}", FAIL, f"may not {', '.join(denied)} {ref} in "
                       f"namespace {ns}", RBAC_FIX.format(ns=ns))
    if unknown:
        return Verdict(f"access {ref}", UNKNOWN, f"could not tell whether you may "
                       f"{', '.join(unknown)} {ref} in namespace {ns}")
    return Verdict(f"access {ref}", OK, f"may {', '.join(rule['verbs'])}")
