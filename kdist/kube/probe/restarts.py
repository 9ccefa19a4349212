"""Whether a cluster restarts pods in place: asked with a server dry run, never a version.

One probe, for `kdist check` and a submit alike (``restart_rules``): a dry-run create of a
tiny pod (else, where kdist's Role may not create pods, a Job) whose container has
``restartPolicyRules`` with the ``RestartAllContainers`` action. An API server whose
ContainerRestartRules gate is off drops the field from its answer (disabled fields are
dropped, not refused); one that knows the field but not the action
(RestartAllContainersOnContainerExits off) refuses it as invalid. Either way the cluster
does not serve in-place restarts; only a rule that comes back is served. A submit asks it
through its Cluster (``Cluster.ask``) before it renders (``kdist.api.jobs.create``), once
per process: nothing is cached.
"""

from __future__ import annotations

from typing import Any

from kdist.kube import kinds
from kdist.kube.probe.verdict import ABSENT, OK, UNKNOWN, Ask, Verdict, brief, dig
from kdist.kube.write.creating import FIELD_MANAGER

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


def restart_rules(ask: Ask, ns: str) -> Verdict:
    """Whether container `restartPolicyRules` survive a dry-run create: a Pod, else (a
    user with kdist's Role may not create pods) a Job, which kdist may create."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": _NAME, "namespace": ns},
           "spec": _POD_SPEC}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": _NAME, "namespace": ns},
           "spec": {"backoffLimit": 0, "template": {"spec": _POD_SPEC}}}
    # A pod first, as the field is a pod's; forbidden (403), the same pod in a Job.
    what, code, answer = "pod", *ask("POST", kinds.POD.collection(ns), pod, dryRun="All",
                               fieldManager=FIELD_MANAGER)
    if code == 403:
        what, code, answer = "job", *ask("POST", kinds.JOB.collection(ns), job, dryRun="All",
                                   fieldManager=FIELD_MANAGER)
    if code in (400, 422) and _names_the_rule(answer):
        return Verdict("restart rules", ABSENT, "container restartPolicyRules with the "
                       f"RestartAllContainers action are refused (a dry-run create of a {what}"
                       f" answered {code}: feature gate RestartAllContainersOnContainerExits "
                       "off): gangs restart by recreating their pods")
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


def _names_the_rule(answer: dict[str, Any]) -> bool:
    """Whether a refusal is of the rule itself (its field or its action), not of the probe."""
    text = str(answer.get("message") or "")
    return "restartPolicyRules" in text or "RestartAllContainers" in text


def _malformed(what: str, problem: str) -> Verdict:
    return Verdict("restart rules", UNKNOWN, f"could not tell: the answer to the dry-run "
                   f"create of a {what} is malformed: {problem}")
