"""Pod Security Standards "restricted" (latest, v1.37), checked on a pod spec.

The same rules the API server's PodSecurity admission applies; the e2e suite
proves it against a real restricted namespace, this keeps unit tests honest.
"""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                   "persistentVolumeClaim", "projected", "secret"}


def violations(pod_spec: dict[str, Any]) -> list[str]:
    """Every restricted-profile rule `pod_spec` breaks (empty when it complies)."""
    out: list[str] = []
    psc = pod_spec.get("securityContext") or {}
    if psc.get("runAsNonRoot") is False:  # refused even when every container says true
        out.append("pod: runAsNonRoot false")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            out.append(f"{flag} is set")
    for v in pod_spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {v['name']} uses {sorted(kinds - ALLOWED_VOLUMES)}")
    containers = [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]
    linux = (pod_spec.get("os") or {}).get("name") != "windows"
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        # Windows pods are exempt from escalation, capabilities and seccomp.
        if linux and sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if linux and "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities.drop must include ALL")
        if linux and set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities {caps['add']}")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if linux and seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{name}: hostPort {p['hostPort']}")
    return out


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs inside a rendered workload object (none for a Service)."""
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "PyTorchJob":
        return [r["template"]["spec"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "JobSet":
        return [r["template"]["spec"]["template"]["spec"] for r in obj["spec"]["replicatedJobs"]]
    if obj["kind"] == "TrainingRuntime":  # a TrainJob's: its JobSet's template
        return pod_specs({"kind": "JobSet", "spec": obj["spec"]["template"]["spec"]})
    if obj["kind"] == "TrainJob":  # on a ClusterTrainingRuntime: its trainer and patch
        from kdist.backends import trainjob

        return [t["spec"] for t in trainjob.BACKEND.pod_templates(obj)]
    return []
