"""The Pod Security level report: every example, crafted pods for each rule, and the CLI line."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.rendering import render, with_backend
from kdist.rendering.security import BASELINE, PRIVILEGED, RESTRICTED, assess
from kdist.spec import load_job, validate_job
from tests.unit import golden, restricted
from tests.unit.helpers import spec_with, write_spec

# What each example needs, and why it leaves "restricted" (a new example must be added here).
EXPECTED = {"ddp-cpu": RESTRICTED, "ddp-gpu": RESTRICTED, "pipeline-cpu": RESTRICTED,
            "ddp-pytorchjob": RESTRICTED, "ddp-rdma": PRIVILEGED}


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
    assert line.startswith("pod security: privileged (hostNetwork (host namespaces); ")
    assert "pod-security.kubernetes.io/enforce: privileged" in line


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
                                        sc(c).update(procMount="Unmasked")), RESTRICTED, None),
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
    assert found.line() == "pod security: baseline (container pytorch runAsUser 0)"
    assert assess(BASE_OBJECTS).line() is None


def test_cli_says_the_level_on_stderr(tmp_path):
    runner = CliRunner()
    rdma = str(golden.ROOT / "examples" / "ddp-gpu-rdma.yaml")
    for verb in ("validate", "render"):
        res = runner.invoke(main, [verb, rdma])
        assert res.exit_code == 0, res.output
        lines = [ln for ln in res.stderr.splitlines() if "pod security" in ln]
        assert lines == [f"warning: {rdma}: pod security: privileged (hostNetwork (host "
                         "namespaces); container pytorch adds IPC_LOCK (not in baseline's "
                         "default set); container pytorch hostPort 29500 (hostNetwork makes "
                         "every containerPort one)): the namespace must allow privileged pods "
                         "(pod-security.kubernetes.io/enforce: privileged)"]
        assert "pod security" not in res.stdout
    chown = write_spec(tmp_path, spec_with(**{"spec.pod": {"capabilities": ["CHOWN"]}}))
    res = runner.invoke(main, ["validate", str(chown)])
    assert res.exit_code == 0
    assert f"{chown}: pod security: baseline (container pytorch adds CHOWN" in res.stderr
    assert "warning" not in res.stderr
    plain = runner.invoke(main, ["validate", str(golden.ROOT / "examples" / "ddp-cpu.yaml")])
    assert plain.exit_code == 0 and "pod security" not in plain.stderr
