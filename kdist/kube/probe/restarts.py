"""Whether a cluster restarts pods in place: asked with a server dry run, never a version.

One probe, asked two ways: `kdist check` (``restart_rules``) sends a tiny pod (else, where
kdist's Role may not create pods, a Job) whose container has ``restartPolicyRules``; a
submit (``serves_in_place``) sends the job itself, rendered in place.

For ``restartMode: inPlace``, which is refused where it is not served (``auto`` needs
no question: ``kdist.api.jobs.create``). A Job rendered to restart in place
(``kdist.rendering.restarts``) is sent with ``dryRun=All``. An API server whose
ContainerRestartRules gate is off drops the container's ``restartPolicyRules`` from
its answer (disabled fields are dropped, not refused); one that knows the field but
not the ``RestartAllContainers`` action (RestartAllContainersOnContainerExits off)
refuses it as invalid. Either way the cluster does not serve in-place restarts; only
a rule that comes back is served.
"""

from __future__ import annotations

from typing import Any, Protocol

from kdist.kube import kinds
from kdist.kube.errors import Action
from kdist.kube.probe.verdict import ABSENT, OK, UNKNOWN, Ask, Verdict, brief, dig
from kdist.kube.watch.objects import restart_mode_of
from kdist.kube.write.creating import FIELD_MANAGER
from kdist.shared.errors import ClusterError

WHAT = ("container restart rules with the RestartAllContainers action (Kubernetes >= 1.36, "
        "gates ContainerRestartRules and RestartAllContainersOnContainerExits)")

# The action kdist's in-place restarts use (kdist.rendering.restarts), not just the field.
_RULES = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]
# Restricted Pod Security (kdist's namespaces enforce it) and a quota that wants limits
# must both admit the probe, or its refusal would say nothing about the field.
_CONTAINER: dict[str, Any] = {
    "name": "probe", "image": "registry.k8s.io/pause:3.10",
    "restartPolicy": "Never", "restartPolicyRules": _RULES,
    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                  "limits": {"cpu": "10m", "memory": "16Mi"}},
    "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                        "runAsUser": 65532, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}},
}
_POD_SPEC = {"restartPolicy": "Never", "containers": [_CONTAINER]}
_NAME = "kdist-check-restart-rules"


class Cluster(Protocol):
    server: str

    def request(self, action: Action, method: str, path: str,
                query: dict[str, Any] | None = None, body: Any = None) -> dict[str, Any]: ...


def serves_in_place(cluster: Cluster, job: dict[str, Any]) -> tuple[bool, str]:
    """(whether the cluster keeps `job`'s restart rule, why not when it does not).

    `job` is the Indexed Job rendered in place. An error that is not about the rule
    (no such namespace, no permission) is raised: the create itself would fail the same.
    """
    kind, meta = kinds.of(job), job["metadata"]
    ns = meta["namespace"]
    # Under a generated name: a job of this name may exist (replaced next, or refused by
    # the create itself, whose error says so better).
    probe = {**job, "metadata": {k: v for k, v in meta.items() if k != "name"}
             | {"generateName": f"{meta['name'][:50]}-"}}
    try:
        answer = cluster.request(Action("create", kind.plural, ns, meta["name"]), "POST",
                                 kind.collection(ns),
                                 {"fieldManager": FIELD_MANAGER, "dryRun": "All"}, probe)
    except ClusterError as e:
        if "restartPolicyRules" in str(e) or "RestartAllContainers" in str(e):
            return False, f"the API server at {cluster.server} refused {WHAT}: {e}"
        raise
    if restart_mode_of(answer) == "inPlace":
        return True, ""
    return False, f"the API server at {cluster.server} dropped {WHAT} from a dry run"


def restart_rules(ask: Ask, ns: str) -> Verdict:
    """Whether container `restartPolicyRules` survive a dry-run create: a Pod, else (a
    user with kdist's Role may not create pods) a Job, which kdist may create."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": _NAME, "namespace": ns},
           "spec": _POD_SPEC}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": _NAME, "namespace": ns},
           "spec": {"backoffLimit": 0, "template": {"spec": _POD_SPEC}}}
    # A pod first, as the field is a pod's; forbidden (403), the same pod in a Job.
    what, code, answer = "pod", *ask("POST", kinds.POD.collection(ns), pod, dryRun="All")
    if code == 403:
        what, code, answer = "job", *ask("POST", kinds.JOB.collection(ns), job, dryRun="All")
    if code >= 300:
        message = " ".join(str(answer.get("message") or "").split())[:200]
        return Verdict("restart rules", UNKNOWN, f"could not tell: the dry-run create of a "
                       f"{what} answered {code}{f': {message}' if message else ''}")
    path = ("spec", "template", "spec") if what == "job" else ("spec",)
    where = ".".join((*path, "containers"))
    containers = dig(answer, *path, "containers")
    if not (isinstance(containers, list) and containers and isinstance(containers[0], dict)):
        return _malformed(what, f"{where} is {brief(containers)}")
    rules = containers[0].get("restartPolicyRules")
    if not isinstance(rules, (list, type(None))):
        return _malformed(what, f"{where}[0].restartPolicyRules is {brief(rules)}")
    if rules:
        return Verdict("restart rules", OK, "container restartPolicyRules (RestartAllContainers) "
                       f"are served (they survived a dry-run create of a {what}): gangs "
                       "restart in place (distributed.restartMode auto)")
    return Verdict("restart rules", ABSENT, "container restartPolicyRules are not served "
                   f"(a dry-run create of a {what} dropped them: feature gate "
                   "ContainerRestartRules off, or Kubernetes < 1.36): gangs restart by "
                   "recreating their pods")


def _malformed(what: str, problem: str) -> Verdict:
    return Verdict("restart rules", UNKNOWN, f"could not tell: the answer to the dry-run "
                   f"create of a {what} is malformed: {problem}")
