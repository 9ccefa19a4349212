"""Which Pod Security Standards level a rendered job needs, and why, for one Kubernetes version.

The rules are PodSecurity admission's own (k8s.io/pod-security-admission,
``policy/check_*.go``, read at v0.37.2) as a cluster of that version applies them with
``enforce-version: latest`` (what kdist's namespace manifest sets); by default
Kubernetes v1.37, the version kdist targets. Every field a rendered pod (typed
settings or an overlay) can carry is covered:

baseline (else "privileged"): no host namespaces (hostNetwork/PID/IPC), no
privileged containers, added capabilities only from the default set, no
hostPath volumes, no hostPort (hostNetwork turns every containerPort into
one), no Windows HostProcess, AppArmor not Unconfined, SELinux type from the
container_* set (container_engine_t from v1.31) and no user/role, procMount
Default, seccomp not Unconfined, sysctls from the version's safe set, no host
in probes or lifecycle handlers (from v1.34).

restricted (else "baseline"): volumes of the restricted types only (image from
v1.33), allowPrivilegeEscalation false, runAsNonRoot true, runAsUser not 0,
seccomp RuntimeDefault or Localhost, drop ALL and add nothing but
NET_BIND_SERVICE (those three waived for spec.os.name windows), procMount
Default (from v1.35 a check of its own).

``hostUsers: false`` waives runAsNonRoot, runAsUser and baseline's procMount
from v1.35 on. Before, the waiver sat behind the UserNamespacesPodSecurityStandards
feature gate, alpha and off by default, so the report never applies it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kdist import backends

RESTRICTED, BASELINE, PRIVILEGED = "restricted", "baseline", "privileged"

#: The Kubernetes minor kdist targets (the test cluster runs v1.37.2).
TARGET = (1, 37)
#: The oldest minor whose rules are modelled (Windows exemptions, seccomp as a field).
OLDEST = (1, 25)
#: The minor from which hostUsers: false waives the root and procMount checks by default.
USERNS_WAIVER = (1, 35)

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
# The safe sysctls, by the minor that added them (check_sysctls.go).
_SYSCTLS_SINCE = {
    (1, 0): ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
             "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
             "net.ipv4.ip_unprivileged_port_start"),
    (1, 27): ("net.ipv4.ip_local_reserved_ports",),
    (1, 29): ("net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
              "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"),
    (1, 32): ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"),
    (1, 37): ("net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"),
}
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                 "persistentVolumeClaim", "projected", "secret"})
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True)
class Rules:
    """What PodSecurity checks on a cluster of one Kubernetes minor."""

    version: tuple[int, int]

    @classmethod
    def of(cls, version: tuple[int, int]) -> Rules:
        if not OLDEST <= version <= TARGET:
            raise ValueError(f"Pod Security rules are known for v{OLDEST[0]}.{OLDEST[1]} to "
                             f"v{TARGET[0]}.{TARGET[1]}, not v{version[0]}.{version[1]}")
        return cls(version)

    @property
    def name(self) -> str:
        return f"Pod Security v{self.version[0]}.{self.version[1]}"

    @property
    def sysctls(self) -> frozenset[str]:
        return frozenset(s for since, names in _SYSCTLS_SINCE.items() if since <= self.version
                         for s in names)

    @property
    def selinux_types(self) -> frozenset[str]:
        return _SELINUX_TYPES | ({"container_engine_t"} if self.version >= (1, 31) else set())

    @property
    def restricted_volumes(self) -> frozenset[str]:
        return _RESTRICTED_VOLUMES | ({"image"} if self.version >= (1, 33) else set())

    @property
    def probe_hosts(self) -> bool:
        return self.version >= (1, 34)

    def userns_waives(self, spec: dict[str, Any]) -> bool:
        """Whether hostUsers: false waives the root and baseline procMount checks here."""
        return spec.get("hostUsers") is False and self.version >= USERNS_WAIVER

    def userns_note(self, spec: dict[str, Any]) -> str:
        """Why a pod with hostUsers: false still fails a check the user may expect waived."""
        if spec.get("hostUsers") is False and self.version < USERNS_WAIVER:
            return (f" (hostUsers: false waives it only from v{USERNS_WAIVER[0]}."
                    f"{USERNS_WAIVER[1]})")
        return ""


@dataclass(frozen=True)
class Assessment:
    level: str
    reasons: tuple[str, ...]  # why it is not one level stricter
    rules: Rules = Rules(TARGET)

    def line(self) -> str | None:
        """`pod security: LEVEL, because ...` for the CLI, or None when restricted."""
        if self.level == RESTRICTED:
            return None
        stricter = RESTRICTED if self.level == BASELINE else BASELINE
        text = (f"pod security: {self.level}, because {stricter} ({self.rules.name}) refuses: "
                f"{'; '.join(self.reasons)}")
        if self.level == PRIVILEGED:
            text += (". The namespace must allow privileged pods "
                     "(pod-security.kubernetes.io/enforce: privileged)")
        return text


def assess(objects: list[dict[str, Any]], version: tuple[int, int] = TARGET) -> Assessment:
    """The level every pod of the rendered `objects` fits on a cluster of `version`, and
    what rules out the next one."""
    rules = Rules.of(version)
    baseline: list[str] = []
    restricted: list[str] = []
    for meta, spec in _pods(objects):
        baseline.extend(r for r in baseline_violations(meta, spec, rules) if r not in baseline)
        restricted.extend(r for r in restricted_violations(spec, rules) if r not in restricted)
    if baseline:
        return Assessment(PRIVILEGED, tuple(baseline), rules)
    if restricted:
        return Assessment(BASELINE, tuple(restricted), rules)
    return Assessment(RESTRICTED, (), rules)


def _pods(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for obj in objects:
        backend = backends.holding(obj.get("kind", ""))
        if backend is None:
            continue
        for t in backend.pod_templates(obj):
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


def baseline_violations(meta: dict[str, Any], spec: dict[str, Any],
                        rules: Rules = Rules(TARGET)) -> list[str]:
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
        if rules.probe_hosts:
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
        if se.get("type", "") not in rules.selinux_types or se.get("user") or se.get("role"):
            out.append(f"{where} seLinuxOptions {se}")
    if not rules.userns_waives(spec):
        note = rules.userns_note(spec)
        out += _each(spec, lambda sc: _proc_mount(sc, note))
    safe = rules.sysctls
    out += [f"sysctl {s.get('name')}" for s in psc.get("sysctls") or []
            if s.get("name") not in safe]
    return out


def _proc_mount(sc: dict[str, Any], note: str = "") -> str | None:
    return f"procMount {sc['procMount']}{note}" if sc.get("procMount") not in (None, "Default") \
        else None


def _added(sc: dict[str, Any], allowed: frozenset[str], what: str) -> str | None:
    extra = [c for c in (sc.get("capabilities") or {}).get("add") or [] if c not in allowed]
    return f"adds {', '.join(extra)} (not in {what})" if extra else None


def _host_probes(c: dict[str, Any]) -> list[str]:
    handlers = [c.get(k) or {} for k in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [(c.get("lifecycle") or {}).get(k) or {} for k in ("postStart", "preStop")]
    hosts = [(h.get(k) or {}).get("host") for h in handlers for k in ("httpGet", "tcpSocket")]
    return [f"container {c.get('name')} probe or lifecycle host {h}" for h in hosts if h]


def restricted_violations(spec: dict[str, Any], rules: Rules = Rules(TARGET)) -> list[str]:
    """Why this pod is not "restricted" beyond baseline's rules (empty when it is)."""
    out = []
    allowed = rules.restricted_volumes
    for v in spec.get("volumes") or []:
        kinds = sorted(set(v) - {"name"} - allowed) if isinstance(v, dict) else []
        if kinds:
            out.append(f"volume {v.get('name')} is {', '.join(kinds)}")
    psc = _sc(spec)
    # Windows pods have no such Linux controls: PodSecurity skips these three for them.
    windows = (spec.get("os") or {}).get("name") == "windows"
    if not windows:
        out += _each(spec, lambda sc: "allows privilege escalation"
                     if sc.get("allowPrivilegeEscalation") is not False else None)
        out += _each(spec, lambda sc: "does not drop ALL capabilities"
                     if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []) else None)
        out += _each(spec, lambda sc: _added(sc, frozenset({"NET_BIND_SERVICE"}),
                                             "restricted's"))
    if rules.userns_waives(spec):
        # Baseline let it through for the user namespace; restricted still refuses it.
        out += _each(spec, lambda sc: _proc_mount(sc, " (restricted refuses it even with "
                                                       "hostUsers: false)"))
    else:
        out += _root(spec, psc, rules.userns_note(spec))
    if not windows:
        out += _seccomp(spec, psc)
    return out


def _root(spec: dict[str, Any], psc: dict[str, Any], note: str) -> list[str]:
    out = []
    if psc.get("runAsUser") == 0:
        out.append(f"pod runAsUser 0{note}")
    out += _each(spec, lambda sc: f"runAsUser 0{note}" if sc.get("runAsUser") == 0 else None)
    if psc.get("runAsNonRoot") is False:
        out.append(f"pod runAsNonRoot false{note}")
    pod_non_root = psc.get("runAsNonRoot") is True
    out += _each(spec, lambda sc: f"may run as root (runAsNonRoot){note}"
                 if sc.get("runAsNonRoot") is False
                 or (sc.get("runAsNonRoot") is None and not pod_non_root) else None)
    return out


def _seccomp(spec: dict[str, Any], psc: dict[str, Any]) -> list[str]:
    out = []
    good = ("RuntimeDefault", "Localhost")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in good:
        out.append(f"pod seccompProfile {pod_seccomp}")
    out += _each(spec, lambda sc: "has no RuntimeDefault/Localhost seccompProfile"
                 if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in good
                 else None)
    return out
