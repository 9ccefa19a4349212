"""The Pod Security level report: every example, crafted pods for each rule, and the CLI line."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.rendering import render, with_backend
from kdist.rendering.security import BASELINE, PRIVILEGED, RESTRICTED, TARGET, assess
from kdist.spec import load_job, validate_job
from tests.unit import golden, restricted
from tests.unit.helpers import spec_with, write_spec

# What each example needs, and why it leaves "restricted" (a new example must be added here).
EXPECTED = {"ddp-cpu": RESTRICTED, "ddp-gpu": RESTRICTED, "pipeline-cpu": RESTRICTED,
            "ddp-pytorchjob": RESTRICTED, "ddp-jobset": RESTRICTED, "ddp-trainjob": RESTRICTED,
            "ddp-rdma": PRIVILEGED,
            "fsdp-cpu": RESTRICTED, "fsdp-gpu": RESTRICTED}


@pytest.mark.parametrize("spec", golden.SPECS, ids=[s.stem for s in golden.SPECS])
@pytest.mark.parametrize("backend", golden.BACKENDS)
def test_every_example_and_case(spec, backend):
    job = load_job(spec)
    objects = render(with_backend(job, backend))
    found = assess(objects)
    if spec.parent.name == "examples":
        assert found.level == EXPECTED[job.metadata.name]
    # Agrees with the independent restricted-profile checker the suite already had.
    pods = [p for o in objects for p in restricted.pod_specs(o)]
    assert (found.level == RESTRICTED) is all(restricted.violations(p) == [] for p in pods)


def test_rdma_example_says_why():
    found = assess(render(load_job(golden.ROOT / "examples" / "ddp-gpu-rdma.yaml")))
    assert found.level == PRIVILEGED
    assert found.reasons == (
        "hostNetwork (host namespaces)",
        "container pytorch adds IPC_LOCK (not in baseline's default set)",
        "container pytorch hostPort 29500 (hostNetwork makes every containerPort one)",
    )
    line = found.line()
    assert line.startswith("pod security: privileged, because baseline (Pod Security v1.37) "
                           "refuses: hostNetwork (host namespaces); ")
    assert line.endswith(". The namespace must allow privileged pods "
                         "(pod-security.kubernetes.io/enforce: privileged)")


BASE_OBJECTS = render(validate_job(spec_with()))


def crafted(change) -> list[dict]:
    """The default job's objects with `change(pod_spec, metadata, container)` applied."""
    objects = copy.deepcopy(BASE_OBJECTS)
    template = objects[0]["spec"]["template"]
    change(template["spec"], template["metadata"], template["spec"]["containers"][0])
    return objects


def sc(c):
    return c["securityContext"]


CASES = [
    # baseline rules: breaking one needs "privileged"
    ("hostPID", lambda p, m, c: p.update(hostPID=True), PRIVILEGED, "hostPID"),
    ("hostIPC", lambda p, m, c: p.update(hostIPC=True), PRIVILEGED, "hostIPC"),
    ("privileged", lambda p, m, c: sc(c).update(privileged=True), PRIVILEGED, "is privileged"),
    ("SYS_ADMIN", lambda p, m, c: sc(c)["capabilities"].update(add=["SYS_ADMIN"]), PRIVILEGED,
     "adds SYS_ADMIN"),
    ("hostPath", lambda p, m, c: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     PRIVILEGED, "volume h is a hostPath"),
    ("hostPort", lambda p, m, c: c["ports"][0].update(hostPort=8080), PRIVILEGED,
     "hostPort 8080"),
    ("apparmor-annotation", lambda p, m, c: m.setdefault("annotations", {}).update(
        {"container.apparmor.security.beta.kubernetes.io/pytorch": "unconfined"}), PRIVILEGED,
     "AppArmor"),
    ("apparmor-field", lambda p, m, c: sc(c).update(appArmorProfile={"type": "Unconfined"}),
     PRIVILEGED, "appArmorProfile Unconfined"),
    ("seccomp-unconfined", lambda p, m, c: p["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), PRIVILEGED, "pod seccompProfile Unconfined"),
    ("selinux-type", lambda p, m, c: sc(c).update(seLinuxOptions={"type": "spc_t"}), PRIVILEGED,
     "seLinuxOptions"),
    ("selinux-user", lambda p, m, c: p["securityContext"].update(seLinuxOptions={"user": "u"}),
     PRIVILEGED, "seLinuxOptions"),
    ("procMount", lambda p, m, c: sc(c).update(procMount="Unmasked"), PRIVILEGED,
     "procMount Unmasked"),
    ("sysctl", lambda p, m, c: p["securityContext"].update(
        sysctls=[{"name": "kernel.msgmax", "value": "1"}]), PRIVILEGED, "sysctl kernel.msgmax"),
    ("probe-host", lambda p, m, c: c.update(livenessProbe={"httpGet": {"host": "10.0.0.1",
                                                                      "port": 80}}),
     PRIVILEGED, "probe or lifecycle host 10.0.0.1"),
    ("windows", lambda p, m, c: sc(c).update(windowsOptions={"hostProcess": True}), PRIVILEGED,
     "hostProcess"),
    ("init-container", lambda p, m, c: p.setdefault("initContainers", []).append(
        {"name": "init", "image": "x", "securityContext": {"privileged": True}}), PRIVILEGED,
     "container init is privileged"),
    # restricted-only rules: breaking one needs "baseline"
    ("CHOWN", lambda p, m, c: sc(c)["capabilities"].update(add=["CHOWN"]), BASELINE,
     "adds CHOWN (not in restricted's)"),
    ("nfs", lambda p, m, c: p["volumes"].append({"name": "n", "nfs": {"server": "s",
                                                                      "path": "/"}}),
     BASELINE, "volume n is nfs"),
    ("escalation", lambda p, m, c: sc(c).update(allowPrivilegeEscalation=True), BASELINE,
     "allows privilege escalation"),
    ("no-drop", lambda p, m, c: sc(c).update(capabilities={}), BASELINE, "does not drop ALL"),
    ("root-user", lambda p, m, c: sc(c).update(runAsUser=0), BASELINE, "runAsUser 0"),
    ("root-allowed", lambda p, m, c: (sc(c).pop("runAsNonRoot"),
                                      p["securityContext"].pop("runAsNonRoot")),
     BASELINE, "may run as root"),
    ("pod-non-root-false", lambda p, m, c: p["securityContext"].update(runAsNonRoot=False),
     BASELINE, "pod runAsNonRoot false"),
    ("no-seccomp", lambda p, m, c: (sc(c).pop("seccompProfile"),
                                    p["securityContext"].pop("seccompProfile")),
     BASELINE, "no RuntimeDefault/Localhost seccompProfile"),
    # allowed by restricted
    ("NET_BIND_SERVICE", lambda p, m, c: sc(c)["capabilities"].update(add=["NET_BIND_SERVICE"]),
     RESTRICTED, None),
    ("safe-sysctl", lambda p, m, c: p["securityContext"].update(
        sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]), RESTRICTED, None),
    ("localhost-profiles", lambda p, m, c: sc(c).update(
        seccompProfile={"type": "Localhost", "localhostProfile": "x.json"},
        appArmorProfile={"type": "Localhost", "localhostProfile": "k"},
        seLinuxOptions={"type": "container_t"}), RESTRICTED, None),
    ("user-namespace", lambda p, m, c: (p.update(hostUsers=False), sc(c).update(runAsUser=0),
                                        sc(c).pop("runAsNonRoot"),
                                        p["securityContext"].pop("runAsNonRoot")),
     RESTRICTED, None),
    # v1.35+: baseline lets a user-namespace pod unmask /proc, restricted does not
    ("user-namespace-procMount", lambda p, m, c: (p.update(hostUsers=False),
                                                  sc(c).update(procMount="Unmasked")),
     BASELINE, "container pytorch procMount Unmasked (restricted refuses it even with hostUsers"),
    ("image-volume", lambda p, m, c: p["volumes"].append(
        {"name": "i", "image": {"reference": "r"}}), RESTRICTED, None),
    ("windows-pod", lambda p, m, c: (p.update(os={"name": "windows"}),
                                     sc(c).update(allowPrivilegeEscalation=True, capabilities={}),
                                     sc(c).pop("seccompProfile"),
                                     p["securityContext"].pop("seccompProfile")),
     RESTRICTED, None),
    ("csi-and-projected", lambda p, m, c: p["volumes"].extend([
        {"name": "c", "csi": {"driver": "d"}}, {"name": "p", "projected": {"sources": []}}]),
     RESTRICTED, None),
]


@pytest.mark.parametrize(("change", "level", "reason"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_rules(change, level, reason):
    found = assess(crafted(change))
    assert found.level == level, found
    if reason is not None:
        assert any(reason in r for r in found.reasons), found.reasons
    pod = crafted(change)[0]["spec"]["template"]["spec"]
    if level != PRIVILEGED and "hostUsers" not in pod:  # the old checker knows no userns
        assert (restricted.violations(pod) == []) is (level == RESTRICTED)


def test_pytorchjob_replicas_are_all_assessed():
    job = validate_job(spec_with(**{"spec.backend": "pytorchjob"}))
    objects = render(job)
    worker = objects[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["hostNetwork"] = True
    assert assess(objects).level == PRIVILEGED


def test_settings_and_overlay_reach_the_report():
    assert assess(render(validate_job(spec_with(**{
        "spec.pod": {"capabilities": ["CHOWN"]}})))).level == BASELINE
    found = assess(render(validate_job(spec_with(**{"spec.podTemplateOverlay": {
        "spec": {"containers": [{"name": "pytorch",
                                 "securityContext": {"runAsUser": 0}}]}}}))))
    assert (found.level, found.reasons) == (BASELINE, ("container pytorch runAsUser 0",))
    assert found.line() == ("pod security: baseline, because restricted (Pod Security v1.37) "
                            "refuses: container pytorch runAsUser 0")
    assert assess(BASE_OBJECTS).line() is None


def test_cli_says_the_level_on_stderr(tmp_path):
    runner = CliRunner()
    rdma = str(golden.ROOT / "examples" / "ddp-gpu-rdma.yaml")
    for verb in ("validate", "render"):
        res = runner.invoke(main, [verb, rdma])
        assert res.exit_code == 0, res.output
        lines = [ln for ln in res.stderr.splitlines() if "pod security" in ln]
        assert lines == [f"warning: {rdma}: pod security: privileged, because baseline "
                         "(Pod Security v1.37) refuses: hostNetwork (host namespaces); container "
                         "pytorch adds IPC_LOCK (not in baseline's default set); container "
                         "pytorch hostPort 29500 (hostNetwork makes every containerPort one). "
                         "The namespace must allow privileged pods "
                         "(pod-security.kubernetes.io/enforce: privileged)"]
        assert "pod security" not in res.stdout
    chown = write_spec(tmp_path, spec_with(**{"spec.pod": {"capabilities": ["CHOWN"]}}))
    res = runner.invoke(main, ["validate", str(chown)])
    assert res.exit_code == 0
    assert (f"{chown}: pod security: baseline, because restricted (Pod Security v1.37) refuses: "
            "container pytorch adds CHOWN") in res.stderr
    assert "warning" not in res.stderr
    plain = runner.invoke(main, ["validate", str(golden.ROOT / "examples" / "ddp-cpu.yaml")])
    assert plain.exit_code == 0 and "pod security" not in plain.stderr


def test_the_report_targets_kubernetes_1_37():
    assert TARGET == (1, 37)  # kdist's test cluster runs v1.37.2
    objects = crafted(lambda p, m, c: sc(c).update(runAsUser=0))
    assert assess(objects) == assess(objects, TARGET)


def userns(change=None):
    def apply(p, m, c):
        p["hostUsers"] = False
        if change:
            change(p, m, c)
    return crafted(apply)


def root_in_userns(p, m, c):
    sc(c).update(runAsUser=0)
    sc(c).pop("runAsNonRoot")
    p["securityContext"].pop("runAsNonRoot")


# (what, pod change, {version: level}): each rule where a Kubernetes minor changed it,
# on both sides of the change (k8s.io/pod-security-admission, policy/check_*.go).
BY_VERSION = [
    # hostUsers: false waives root only from v1.35; before, behind a gate that is off by default
    ("userns-root", lambda: userns(root_in_userns),
     {(1, 25): BASELINE, (1, 34): BASELINE, (1, 35): RESTRICTED, (1, 37): RESTRICTED}),
    ("userns-runAsNonRoot-false", lambda: userns(lambda p, m, c: p["securityContext"].update(
        runAsNonRoot=False)), {(1, 34): BASELINE, (1, 35): RESTRICTED}),
    # ... and procMount: baseline waives it from v1.35, restricted never does
    ("userns-procMount", lambda: userns(lambda p, m, c: sc(c).update(procMount="Unmasked")),
     {(1, 34): PRIVILEGED, (1, 35): BASELINE, (1, 37): BASELINE}),
    ("procMount-no-userns", lambda: crafted(lambda p, m, c: sc(c).update(procMount="Unmasked")),
     {(1, 34): PRIVILEGED, (1, 37): PRIVILEGED}),
    ("sysctl-1.37", lambda: crafted(lambda p, m, c: p["securityContext"].update(
        sysctls=[{"name": "net.ipv4.tcp_slow_start_after_idle", "value": "0"},
                 {"name": "net.ipv4.tcp_notsent_lowat", "value": "1"}])),
     {(1, 36): PRIVILEGED, (1, 37): RESTRICTED}),
    ("sysctl-1.32", lambda: crafted(lambda p, m, c: p["securityContext"].update(
        sysctls=[{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}])),
     {(1, 31): PRIVILEGED, (1, 32): RESTRICTED}),
    ("sysctl-1.27", lambda: crafted(lambda p, m, c: p["securityContext"].update(
        sysctls=[{"name": "net.ipv4.ip_local_reserved_ports", "value": "8080"}])),
     {(1, 26): PRIVILEGED, (1, 27): RESTRICTED}),
    ("selinux-engine", lambda: crafted(lambda p, m, c: sc(c).update(
        seLinuxOptions={"type": "container_engine_t"})),
     {(1, 30): PRIVILEGED, (1, 31): RESTRICTED}),
    ("probe-host", lambda: crafted(lambda p, m, c: c.update(
        readinessProbe={"tcpSocket": {"host": "h", "port": 80}})),
     {(1, 33): RESTRICTED, (1, 34): PRIVILEGED}),
    ("image-volume", lambda: crafted(lambda p, m, c: p["volumes"].append(
        {"name": "i", "image": {"reference": "r"}})), {(1, 32): BASELINE, (1, 33): RESTRICTED}),
]


@pytest.mark.parametrize(("make", "levels"), [c[1:] for c in BY_VERSION],
                         ids=[c[0] for c in BY_VERSION])
def test_rules_by_kubernetes_version(make, levels):
    for version, level in levels.items():
        found = assess(make(), version)
        assert found.level == level, (version, found)
        name = f"Pod Security v{version[0]}.{version[1]}"
        assert found.rules.name == name
        if level != RESTRICTED:
            assert f"({name}) refuses: " in found.line()


def test_a_waiver_the_version_lacks_says_so():
    found = assess(userns(root_in_userns), (1, 34))
    assert "container pytorch runAsUser 0 (hostUsers: false waives it only from v1.35)" \
        in found.reasons
    assert found.line().startswith("pod security: baseline, because restricted "
                                   "(Pod Security v1.34) refuses: ")


@pytest.mark.parametrize("version", [(1, 24), (1, 38), (2, 0), (0, 37)])
def test_a_version_without_known_rules_is_refused(version):
    with pytest.raises(ValueError, match=r"Pod Security rules are known for v1\.25 to v1\.37"):
        assess(BASE_OBJECTS, version)
