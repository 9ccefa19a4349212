"""Which Pod Security Standards level a rendered job needs, and why.

The rules are PodSecurity admission's own (k8s.io/pod-security-admission,
``policy/check_*.go``, as of Kubernetes v1.34, the version kdist pins), for
every field a rendered pod (typed settings or an overlay) can carry:

baseline (else "privileged"): no host namespaces (hostNetwork/PID/IPC), no
privileged containers, added capabilities only from the default set, no
hostPath volumes, no hostPort (hostNetwork turns every containerPort into
one), no Windows HostProcess, AppArmor not Unconfined, SELinux type from the
container_* set and no user/role, procMount Default, seccomp not Unconfined,
sysctls from the safe set, no host in probes or lifecycle handlers.

restricted (else "baseline"): volumes of the restricted types only,
allowPrivilegeEscalation false, runAsNonRoot true, runAsUser not 0 (the last
two waived with hostUsers: false), seccomp RuntimeDefault or Localhost, drop
ALL and add nothing but NET_BIND_SERVICE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

RESTRICTED, BASELINE, PRIVILEGED = "restricted", "baseline", "privileged"

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Assessment:
    level: str
    reasons: tuple[str, ...]  # why it is not one level stricter

    def line(self) -> str | None:
        """`pod security: LEVEL (why)` for the CLI, or None when restricted."""
        if self.level == RESTRICTED:
            return None
        text = f"pod security: {self.level} ({'; '.join(self.reasons)})"
        if self.level == PRIVILEGED:
            text += (": the namespace must allow privileged pods "
                     "(pod-security.kubernetes.io/enforce: privileged)")
        return text


def assess(objects: list[dict[str, Any]]) -> Assessment:
    """The level every pod of the rendered `objects` fits, and what rules out the next one."""
    baseline: list[str] = []
    restricted: list[str] = []
    for meta, spec in _pods(objects):
        baseline.extend(r for r in baseline_violations(meta, spec) if r not in baseline)
        restricted.extend(r for r in restricted_violations(spec) if r not in restricted)
    if baseline:
        return Assessment(PRIVILEGED, tuple(baseline))
    if restricted:
        return Assessment(BASELINE, tuple(restricted))
    return Assessment(RESTRICTED, ())


def _pods(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for obj in objects:
        if obj.get("kind") == "Job":
            templates = [obj["spec"]["template"]]
        elif obj.get("kind") == "PyTorchJob":
            templates = [r["template"] for r in obj["spec"]["pytorchReplicaSpecs"].values()]
        else:
            continue
        for t in templates:
            yield t.get("metadata") or {}, t.get("spec") or {}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or [] if isinstance(c, dict)]


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def _each(spec: dict[str, Any], test: Callable[[dict[str, Any]], str | None]) -> list[str]:
    """`test` on every container's securityContext; its message prefixed with the name."""
    out = []
    for c in _containers(spec):
        problem = test(_sc(c))
        if problem:
            out.append(f"container {c.get('name')} {problem}")
    return out


def baseline_violations(meta: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """Why this pod is not "baseline" (empty when it is)."""
    out = [f"{flag} (host namespaces)" for flag in ("hostNetwork", "hostPID", "hostIPC")
           if spec.get(flag)]
    psc = _sc(spec)
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("windowsOptions.hostProcess")
    out += _each(spec, lambda sc: "is privileged" if sc.get("privileged") else None)
    out += _each(spec, lambda sc: _added(sc, BASELINE_CAPABILITIES, "baseline's default set"))
    out += [f"volume {v.get('name')} is a hostPath" for v in spec.get("volumes") or []
            if isinstance(v, dict) and "hostPath" in v]
    for c in _containers(spec):
        for p in c.get("ports") or []:
            port = p.get("hostPort") or (p.get("containerPort") if spec.get("hostNetwork")
                                         else 0)
            if port:
                why = " (hostNetwork makes every containerPort one)" if spec.get("hostNetwork") \
                    else ""
                out.append(f"container {c.get('name')} hostPort {port}{why}")
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"container {c.get('name')} windowsOptions.hostProcess")
        out += _host_probes(c)
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(_APPARMOR_ANNOTATION) and value not in ("", "runtime/default") \
                and not str(value).startswith("localhost/"):
            out.append(f"AppArmor annotation {key}: {value}")
    for where, sc in [("pod", psc), *((f"container {c.get('name')}", _sc(c))
                                      for c in _containers(spec))]:
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where} appArmorProfile Unconfined")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where} seccompProfile Unconfined")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"{where} seLinuxOptions {se}")
    if spec.get("hostUsers") is not False:
        out += _each(spec, lambda sc: f"procMount {sc['procMount']}"
                     if sc.get("procMount") not in (None, "Default") else None)
    out += [f"sysctl {s.get('name')}" for s in psc.get("sysctls") or []
            if s.get("name") not in SAFE_SYSCTLS]
    return out


def _added(sc: dict[str, Any], allowed: frozenset[str], what: str) -> str | None:
    extra = [c for c in (sc.get("capabilities") or {}).get("add") or [] if c not in allowed]
    return f"adds {', '.join(extra)} (not in {what})" if extra else None


def _host_probes(c: dict[str, Any]) -> list[str]:
    handlers = [c.get(k) or {} for k in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [(c.get("lifecycle") or {}).get(k) or {} for k in ("postStart", "preStop")]
    hosts = [(h.get(k) or {}).get("host") for h in handlers for k in ("httpGet", "tcpSocket")]
    return [f"container {c.get('name')} probe or lifecycle host {h}" for h in hosts if h]


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Why this pod is not "restricted" beyond baseline's rules (empty when it is)."""
    out = []
    for v in spec.get("volumes") or []:
        kinds = sorted(set(v) - {"name"} - RESTRICTED_VOLUMES) if isinstance(v, dict) else []
        if kinds:
            out.append(f"volume {v.get('name')} is {', '.join(kinds)}")
    out += _each(spec, lambda sc: "allows privilege escalation"
                 if sc.get("allowPrivilegeEscalation") is not False else None)
    out += _each(spec, lambda sc: "does not drop ALL capabilities"
                 if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []) else None)
    out += _each(spec, lambda sc: _added(sc, frozenset({"NET_BIND_SERVICE"}), "restricted's"))
    psc = _sc(spec)
    if spec.get("hostUsers") is not False:
        if psc.get("runAsUser") == 0:
            out.append("pod runAsUser 0")
        out += _each(spec, lambda sc: "runAsUser 0" if sc.get("runAsUser") == 0 else None)
        if psc.get("runAsNonRoot") is False:
            out.append("pod runAsNonRoot false")
        pod_non_root = psc.get("runAsNonRoot") is True
        out += _each(spec, lambda sc: "may run as root (runAsNonRoot)"
                     if sc.get("runAsNonRoot") is False
                     or (sc.get("runAsNonRoot") is None and not pod_non_root) else None)
    good = ("RuntimeDefault", "Localhost")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in good:
        out.append(f"pod seccompProfile {pod_seccomp}")
    out += _each(spec, lambda sc: "has no RuntimeDefault/Localhost seccompProfile"
                 if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in good
                 else None)
    return out
