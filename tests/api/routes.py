"""How a Kubernetes API path names what it acts on, for the fake server and the write guard.

Paths are parsed as they arrive on the wire (percent-encoded); each segment is
decoded once, as the API server does. A trailing slash leaves an empty last
segment, which the API server treats as the collection itself: that is how
`kdist delete ""` became DELETE of every Job in a namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from kdist import backends

# The resources the fake server knows: plural -> (apiVersion, kind).
RESOURCES: dict[str, tuple[str, str]] = {
    "jobs": ("batch/v1", "Job"),
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"),
    "services": ("v1", "Service"),
    "pods": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    "secrets": ("v1", "Secret"),
    "endpointslices": ("discovery.k8s.io/v1", "EndpointSlice"),
    "events": ("v1", "Event"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    "localqueues": ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    "podgroups": ("scheduling.k8s.io/v1beta1", "PodGroup"),
    # Cluster-scoped (stored in namespace ""): what a TrainJob's runtimeRef names.
    "clustertrainingruntimes": ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
}
# Every training kind the registry has, and what each is built from (a TrainJob's
# TrainingRuntime), from the registry itself: a new backend's kinds are served here too.
RESOURCES.update({k.plural: (k.api_version, k.kind) for b in backends.BACKENDS
                  for k in (b.kind, *b.created_first) if k.plural not in RESOURCES})
# Reviews: created, answered, never stored (cluster-scoped, so no namespace in the URL).
REVIEWS: dict[str, tuple[str, str]] = {
    "selfsubjectaccessreviews": ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    "selfsubjectreviews": ("authentication.k8s.io/v1", "SelfSubjectReview"),
}
KINDS = {kind: (api_version, plural) for plural, (api_version, kind) in RESOURCES.items()}

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class Route:
    """What one request path addresses.

    shape: "discovery" (/apis/G/V), "collection" (no name), "item", "subresource",
    "namespace" (/api/v1/namespaces/NS itself), or "other" (anything else).
    """

    shape: str
    api_version: str = ""
    plural: str = ""
    namespace: str | None = None
    name: str = ""
    subresource: str = ""


def parse(raw_path: str) -> Route:
    """The Route of a path such as /apis/batch/v1/namespaces/default/jobs/x (no query)."""
    segments = raw_path.split("/")[1:] if raw_path.startswith("/") else []
    if len(segments) >= 2 and segments[0] == "api" and segments[1] == "v1":
        api_version, rest = "v1", segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        api_version, rest = f"{segments[1]}/{segments[2]}", segments[3:]
    else:
        return Route("other")
    rest = [unquote(s) for s in rest]
    if not rest or rest == [""]:
        return Route("discovery", api_version)
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) == 2:
        return Route("namespace", api_version, "namespaces", name=rest[1])
    plural, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 3 or (len(rest) == 3 and not name):
        return Route("other", api_version, plural, namespace)
    if not name:
        return Route("collection", api_version, plural, namespace)
    if len(rest) == 3:
        return Route("subresource", api_version, plural, namespace, name, rest[2])
    return Route("item", api_version, plural, namespace, name)


def write_problem(method: str, raw_path: str, body: object) -> str | None:
    """Why a request would be a dangerous write, or None when it is not one.

    DELETE, PUT and PATCH must name exactly one object in a valid namespace: never a
    collection (a delete there is deletecollection), never a namespace, never a dot
    segment. POST is how Kubernetes creates, so it may only target a namespaced
    collection, with a body naming one valid object of that resource in that namespace.
    """
    if method not in ("POST", "PUT", "PATCH", "DELETE"):
        return None
    route = parse(raw_path)
    if method != "POST":
        if route.shape != "item":
            return f"{method} of a {route.shape} URL"
        return _where_problem(route) or _name_problem(route.name)
    if route.shape != "collection":
        return f"POST to a {route.shape} URL (kdist only creates)"
    if REVIEWS.get(route.plural) == (route.api_version, getattr(body, "get", dict().get)("kind")):
        return None  # a question, not a write
    if raw_path.endswith("/"):
        return "POST to a URL with a trailing slash"
    problem = _where_problem(route)
    if problem:
        return problem
    meta = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        return "POST without an object body"
    if body.get("kind") != RESOURCES.get(route.plural, ("", ""))[1]:
        return f"POST of a {body.get('kind')!r} to {route.plural}"
    if meta.get("namespace") not in (None, route.namespace):
        return f"POST of an object of namespace {meta.get('namespace')!r} to {route.namespace!r}"
    return _name_problem(meta.get("name"))


def _where_problem(route: Route) -> str | None:
    if route.plural not in RESOURCES:
        return f"write to unknown resource {route.plural!r}"
    if route.namespace is None:
        return "write outside a namespace"
    if not DNS1123_LABEL.fullmatch(route.namespace):
        return f"write in invalid namespace {route.namespace!r}"
    return None


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not DNS1123_SUBDOMAIN.fullmatch(name):
        return f"write to invalid object name {name!r}"
    return None
