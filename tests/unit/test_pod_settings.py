"""Pod settings (spec.pod, scheduling's affinity/spread, resources.extended, socketInterface),
the NCCL env defaults and spec.podTemplateOverlay: validation with field paths, rendering on
both backends, and the Kubernetes schema on the result."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from kdist import backends
from kdist.rendering import render
from kdist.rendering.overlay import merge
from kdist.shared.errors import SpecError
from kdist.spec import validate_job
from kdist.spec.overlay import CONTAINER_FIELDS, POD_SPEC_FIELDS
from tests.unit import crd, restricted
from tests.unit.helpers import spec_with

K8S_VERSION = "1.37"
BACKENDS = backends.NAMES

FULL = {
    "spec.resources": {"gpus": 2, "cpu": "8", "memory": "16Gi",
                       "extended": {"rdma/hca": 1, "vpc.amazonaws.com/efa": "4"}},
    "spec.procsPerNode": "auto",
    "spec.distributed": {"socketInterface": "eth0,eth1"},
    "spec.checkpoint": {"path": "/ckpt", "volume": {"emptyDir": {}}},
    "spec.pod": {
        "serviceAccountName": "trainer",
        "annotations": {"k8s.v1.cni.cncf.io/networks": "rdma-net"},
        "runtimeClassName": "nvidia",
        "hostNetwork": True,
        "capabilities": ["IPC_LOCK"],
        "terminationGracePeriodSeconds": 90,
        "volumes": [
            {"name": "data", "mountPath": "/data", "readOnly": True,
             "persistentVolumeClaim": {"claimName": "imagenet"}},
            {"name": "cfg", "mountPath": "/etc-app", "configMap": {
                "name": "cfg", "items": [{"key": "a", "path": "a.yaml"}], "defaultMode": 0o444}},
            {"name": "tok", "mountPath": "/secrets/tok", "subPath": "token",
             "secret": {"secretName": "tok", "optional": True}},
            {"name": "lustre", "mountPath": "/lustre", "csi": {
                "driver": "fsx.csi.aws.com", "volumeAttributes": {"fs": "x"},
                "nodePublishSecretRef": {"name": "s"}}},
            {"name": "scratch", "mountPath": "/scratch", "emptyDir": {"sizeLimit": "10Gi"}},
        ],
    },
    "spec.scheduling": {
        "schedulerName": "volcano",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]},
                                          {"key": "gen", "operator": "Gt", "values": ["3"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": [
                        {"key": "app", "operator": "Exists"}]}}}]},
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2}],
    },
}


def rendered(backend: str = "indexed-job", **changes):
    job = validate_job(spec_with(**{**changes, "spec.backend": backend}))
    return render(job)


def pod_specs(objects):
    return [p for o in objects for p in restricted.pod_specs(o)]


def container(objects):
    return pod_specs(objects)[0]["containers"][0]


def templates(objects):
    """The pod templates rendered: the training object's, or (a TrainJob) its runtime's."""
    return [t for o in objects if backends.holding(o["kind"]) is not None
            for t in backends.holding(o["kind"]).pod_templates(o)]


def env_of(objects) -> dict:
    return {e["name"]: e.get("value") for e in container(objects)["env"]}


def assert_schema_valid(objects):
    for obj in objects:
        if obj["kind"] in crd.CRDS:
            assert crd.errors(obj) == []
            for spec in restricted.pod_specs(obj):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
                kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_setting_renders_and_passes_the_schema(backend):
    objects = rendered(backend, **FULL)
    assert_schema_valid(objects)
    for pod in pod_specs(objects):
        assert pod["serviceAccountName"] == "trainer"
        assert pod["automountServiceAccountToken"] is True
        assert pod["runtimeClassName"] == "nvidia"
        assert pod["schedulerName"] == "volcano"
        assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
        assert pod["terminationGracePeriodSeconds"] == 90
        assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][1] == {
                "key": "gen", "operator": "Gt", "values": ["3"]}
        spread = pod["topologySpreadConstraints"][0]
        assert spread["labelSelector"] == {"matchLabels": {"kdist.dev/job-name": "unit-job"}}
        (c,) = pod["containers"]
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        for kind in ("requests", "limits"):
            assert c["resources"][kind]["rdma/hca"] == "1"
            assert c["resources"][kind]["vpc.amazonaws.com/efa"] == "4"
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
        assert mounts["tok"]["subPath"] == "token"
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["lustre"]["csi"]["driver"] == "fsx.csi.aws.com"
        assert volumes["cfg"]["configMap"]["defaultMode"] == 0o444
        assert set(volumes) == {"dshm", "checkpoint", "data", "cfg", "tok", "lustre", "scratch",
                                "kdist-home"}
    for t in templates(objects):
        assert t["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_defaults_keep_the_pod_as_it_was(backend):
    objects = rendered(backend)
    for pod in pod_specs(objects):
        assert pod["terminationGracePeriodSeconds"] == 60  # room for a checkpoint on SIGTERM
        assert pod["automountServiceAccountToken"] is False
        for key in ("serviceAccountName", "hostNetwork", "dnsPolicy", "affinity",
                    "runtimeClassName", "schedulerName", "topologySpreadConstraints"):
            assert key not in pod
        assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert all("annotations" not in t["metadata"] for t in templates(objects))


@pytest.mark.parametrize(("pod", "mounted"), [
    ({"serviceAccountName": "sa"}, True),
    ({"serviceAccountName": "sa", "automountServiceAccountToken": False}, False),
    ({"automountServiceAccountToken": True}, True),
    ({}, False),
])
def test_service_account_token(pod, mounted):
    assert pod_specs(rendered(**{"spec.pod": pod}))[0]["automountServiceAccountToken"] is mounted


def test_nccl_env_defaults_for_gpu_jobs():
    gpu = {"spec.resources": {"gpus": 2}, "spec.procsPerNode": "auto"}
    env = env_of(rendered(**gpu))
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert env["KDIST_GPUS"] == "2"
    assert "NCCL_SOCKET_IFNAME" not in env and "GLOO_SOCKET_IFNAME" not in env
    mine = env_of(rendered(**gpu, **{"spec.env": {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
                                                  "NCCL_DEBUG": "INFO"}}))
    assert mine["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # the user's value wins
    assert mine["NCCL_DEBUG"] == "INFO"  # passed through as given
    cpu = env_of(rendered())
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in cpu and "KDIST_GPUS" not in cpu
    # procsPerNode auto on a CPU pod: the launcher must not count the runtime's GPUs.
    assert env_of(rendered(**{"spec.procsPerNode": "auto"}))["KDIST_GPUS"] == "0"


def test_socket_interface_only_when_given_and_user_env_wins():
    env = env_of(rendered(**{"spec.pod": {"hostNetwork": True}}))
    assert "NCCL_SOCKET_IFNAME" not in env and "GLOO_SOCKET_IFNAME" not in env
    env = env_of(rendered(**{"spec.distributed": {"socketInterface": "bond0"},
                             "spec.env": {"NCCL_SOCKET_IFNAME": "^docker,lo"}}))
    assert env["NCCL_SOCKET_IFNAME"] == "^docker,lo"
    assert env["GLOO_SOCKET_IFNAME"] == "bond0"


BAD = [
    ({"spec.scheduling": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu", "operator": "In"}]}]}}}}},
     "spec.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms[0].matchExpressions[0]", "needs at least one value"),
    ({"spec.scheduling": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["a"]}]}]}}}}},
     "spec.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms[0].matchExpressions[0]", "exactly one integer value"),
    ({"spec.scheduling": {"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}}},
     "spec.scheduling.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
     ".topologyKey", "is required"),
    ({"spec.scheduling": {"affinity": {"nodeAfinity": {}}}},
     "spec.scheduling.affinity.nodeAfinity", "did you mean 'nodeAffinity'"),
    ({"spec.scheduling": {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
         "minDomains": 2}]}},
     "spec.scheduling.topologySpreadConstraints[0]", "minDomains needs"),
    ({"spec.scheduling": {"schedulerName": "Volcano!"}}, "spec.scheduling.schedulerName",
     "DNS-1123"),
    ({"spec.pod": {"volumes": [{"name": "dshm", "mountPath": "/x", "emptyDir": {}}]}},
     "spec.pod.volumes[0].name", "kdist's own"),
    ({"spec.pod": {"volumes": [{"name": "kdist-code", "mountPath": "/x", "emptyDir": {}}]}},
     "spec.pod.volumes[0].name", "kdist's own"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/x", "emptyDir": {},
                                "secret": {"secretName": "s"}}]}},
     "spec.pod.volumes[0]", "exactly one of"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/etc/x", "emptyDir": {}}]}},
     "spec.pod.volumes[0].mountPath", "system directory"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/x", "subPath": "../up",
                                "emptyDir": {}}]}},
     "spec.pod.volumes[0].subPath", "relative path"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/x", "emptyDir": {}},
                               {"name": "d", "mountPath": "/y", "emptyDir": {}}]}},
     "spec.pod", "two volumes have the name 'd'"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/ckpt", "emptyDir": {}}]},
      "spec.checkpoint": {"path": "/ckpt/", "volume": {"emptyDir": {}}}},
     "spec", "also a spec.pod.volumes mountPath"),
    ({"spec.pod": {"volumes": [{"name": "d", "mountPath": "/x", "configMap": {
        "name": "c", "defaultMode": 1000}}]}},
     "spec.pod.volumes[0].configMap.defaultMode", "<= 511"),
    ({"spec.pod": {"capabilities": ["CAP_IPC_LOCK"]}}, "spec.pod.capabilities",
     "without CAP_ (IPC_LOCK)"),
    ({"spec.pod": {"capabilities": ["ipc_lock"]}}, "spec.pod.capabilities", "not a Linux"),
    ({"spec.pod": {"capabilities": ["ALL"]}}, "spec.pod.capabilities", "not a Linux"),
    ({"spec.pod": {"annotations": {"batch.kubernetes.io/job-completion-index": "3"}}},
     "spec.pod.annotations", "set by kdist or the Job controller"),
    ({"spec.pod": {"serviceAccountName": "Trainer"}}, "spec.pod.serviceAccountName",
     "DNS-1123"),
    ({"spec.pod": {"terminationGracePeriodSeconds": -1}},
     "spec.pod.terminationGracePeriodSeconds", ">= 0"),
    ({"spec.pod": {"hostNetwork": "yes"}}, "spec.pod.hostNetwork", "true or false"),
    ({"spec.resources": {"extended": {"nvidia.com/gpu": 1}}}, "spec.resources.extended",
     "use resources.gpus"),
    ({"spec.resources": {"extended": {"hugepages-2Mi": "1Gi"}}}, "spec.resources.extended",
     "needs a domain"),
    ({"spec.resources": {"extended": {"example.kubernetes.io/x": 1}}},
     "spec.resources.extended", "native resource"),
    ({"spec.resources": {"extended": {"rdma/hca": "0.5"}}}, "spec.resources.extended",
     "whole number"),
    ({"spec.resources": {"extended": {"rdma/hca": 0}}}, "spec.resources.extended",
     "whole number"),
    ({"spec.distributed": {"socketInterface": "^docker"}}, "spec.distributed.socketInterface",
     "NCCL_SOCKET_IFNAME"),
    ({"spec.distributed": {"socketInterface": "a-very-long-interface0"}},
     "spec.distributed.socketInterface", "interface names"),
    ({"spec.env": {"NCCL_DEBUG": "verbose"}}, "spec.env", "NCCL_DEBUG 'verbose'"),
]


@pytest.mark.parametrize(("changes", "path", "message"), BAD,
                         ids=[f"{i}-{b[1].rsplit('.', 1)[-1]}" for i, b in enumerate(BAD)])
def test_bad_settings_name_their_field(changes, path, message):
    with pytest.raises(SpecError) as err:
        validate_job(spec_with(**changes))
    problems = err.value.problems
    assert any(p.startswith(f"<job>: {path}") and message in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_yaml_octal_count_is_refused(tmp_path):
    from kdist.spec import parse_job

    text = json.dumps(spec_with()).replace('"nodes": 2', '"nodes": 2, "resources": '
                                           '{"extended": {"rdma/hca": 010}}')
    with pytest.raises(SpecError, match="quote it"):
        parse_job(text)


# --- the overlay -----------------------------------------------------------------------


def test_merge_semantics():
    base = {"spec": {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}],
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                        "args": ["--a"]}],
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
        "nodeSelector": {"a": "1", "b": "2"},
        "tolerations": [{"key": "t1", "operator": "Exists"}],
    }}
    patch = {"spec": {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "2"},
                                             {"name": "Y", "value": "3"}],
                        "volumeMounts": [{"mountPath": "/v", "readOnly": True}],
                        "args": ["--b"]},
                       {"name": "side", "image": "busybox"}],
        "volumes": [{"name": "w", "$patch": "delete"}],
        "nodeSelector": {"b": None, "c": "3"},
        "tolerations": [{"key": "t2", "operator": "Exists"}],
        "securityContext": {"$patch": "replace", "runAsUser": 5},
    }}
    out = merge(base, patch)
    a, side = out["spec"]["containers"]
    assert a["env"] == [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]
    assert a["volumeMounts"] == [{"name": "v", "mountPath": "/v", "readOnly": True}]
    assert a["args"] == ["--b"]  # a list without a merge key is replaced
    assert side == {"name": "side", "image": "busybox"}
    assert out["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    assert out["spec"]["nodeSelector"] == {"a": "1", "c": "3"}
    assert out["spec"]["tolerations"] == [{"key": "t2", "operator": "Exists"}]
    assert out["spec"]["securityContext"] == {"runAsUser": 5}
    assert base["spec"]["nodeSelector"] == {"a": "1", "b": "2"}  # inputs untouched
    base2 = {"spec": {"securityContext": {"runAsUser": 1, "fsGroup": 1}}}
    replaced = merge(base2, {"spec": {"securityContext": {"$patch": "replace", "runAsUser": 5}}})
    assert replaced["spec"]["securityContext"] == {"runAsUser": 5}
    gone = merge(base2, {"spec": {"securityContext": {"$patch": "delete"}}})
    assert "securityContext" not in gone["spec"]


OVERLAY = {
    "metadata": {"labels": {"sidecar.istio.io/inject": "false"},
                 "annotations": {"example.com/note": "hi"}},
    "spec": {
        "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
        "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["storage"]}],
        "shareProcessNamespace": True,
        "volumes": [{"name": "hp", "emptyDir": {"medium": "HugePages"}}],
        "containers": [{
            "name": "pytorch",
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "OMP_NUM_THREADS", "value": "7"}],
            "resources": {"limits": {"hugepages-2Mi": "1Gi"}},
            "volumeMounts": [{"name": "hp", "mountPath": "/hugepages"}],
        }],
        "initContainers": [{"name": "warm", "image": "busybox:1", "command": ["true"],
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}],
    },
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_overlay_reaches_every_replica_and_passes_the_schema(backend):
    objects = rendered(backend, **{"spec.nodes": 3, "spec.podTemplateOverlay": OVERLAY})
    assert_schema_valid(objects)
    assert len(templates(objects)) == (2 if backend == "pytorchjob" else 1)  # Master, Worker
    for t in templates(objects):
        assert t["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert t["metadata"]["labels"]["kdist.dev/job-name"] == "unit-job"
        spec = t["spec"]
        assert spec["shareProcessNamespace"] is True
        assert spec["initContainers"][0]["name"] == "warm"
        c = spec["containers"][0]
        env = {e["name"]: e for e in c["env"]}
        assert env["OMP_NUM_THREADS"]["value"] == "7"
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert env["KDIST_NNODES"]["value"] == "3"  # the contract is intact
        assert c["resources"]["limits"]["hugepages-2Mi"] == "1Gi"
        assert c["resources"]["limits"]["cpu"] == "1"  # merged, not replaced
        assert {"name": "hp", "mountPath": "/hugepages"} in c["volumeMounts"]


OVERLAY_BAD = [
    ({"spec": {"containers": [{"name": "pytorch", "command": ["sh"]}]}}, "command: set by kdist"),
    ({"spec": {"containers": [{"name": "pytorch", "args": ["x"]}]}}, "args: set by kdist"),
    ({"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}, "use spec.image"),
    ({"spec": {"containers": [{"name": "pytorch", "env": [{"name": "KDIST_NODE_RANK",
                                                           "value": "0"}]}]}},
     "env[0]: 'KDIST_NODE_RANK' is set by kdist"),
    ({"spec": {"containers": [{"name": "pytorch", "env": [{"name": "RANK", "$patch":
                                                           "delete"}]}]}}, "'RANK' is set"),
    ({"spec": {"containers": [{"name": "pytorch", "$patch": "delete"}]}}, "cannot be deleted"),
    ({"spec": {"containers": None}}, "cannot be removed"),
    ({"spec": {"restartPolicy": "OnFailure"}}, "spec.restartPolicy: set by kdist"),
    ({"spec": {"subdomain": "x"}}, "spec.subdomain: set by kdist"),
    ({"spec": {"$patch": "replace", "containers": []}}, "spec.$patch"),
    ({"spec": {"tolerationz": []}}, "spec.tolerationz: unknown pod spec field"),
    ({"spec": {"containers": [{"name": "pytorch", "imagePullPolicyy": "Always"}]}},
     "imagePullPolicyy: unknown container field"),
    ({"spec": {"containers": [{"image": "busybox"}]}}, "containers[0]: needs name"),
    ({"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}},
     "appears twice"),
    ({"spec": {"volumes": [{"name": "a", "$retainKeys": ["x"]}]}}, "only $patch"),
    ({"spec": {"containers": [{"name": "x", "$patch": "replace"}]}}, "can only be deleted"),
    ({"metadata": {"name": "x"}}, "metadata.name: an overlay may set labels and annotations"),
    ({"metadata": {"labels": {"kdist.dev/job-name": "other"}}}, "set by kdist"),
    ({"metadata": {"annotations": {"n": 5}}}, "must be a string"),
    ({"kind": "Pod"}, "kind: unknown field"),
    ({}, "is empty"),
]


@pytest.mark.parametrize(("overlay", "message"), OVERLAY_BAD,
                         ids=[str(i) for i in range(len(OVERLAY_BAD))])
def test_overlay_rules_name_the_field(overlay, message):
    with pytest.raises(SpecError) as err:
        validate_job(spec_with(**{"spec.podTemplateOverlay": overlay}))
    (problem,) = err.value.problems
    assert problem.startswith("<job>: spec.podTemplateOverlay: ")
    assert message in problem


@pytest.mark.parametrize(("overlay", "message"), [
    ({"spec": {"containers": [{"name": "pytorch", "volumeMounts": [
        {"name": "nope", "mountPath": "/n"}]}]}}, "mounts volume 'nope', which is not"),
    ({"spec": {"volumes": [{"name": "dshm", "$patch": "delete"}]}},
     "mounts volume 'dshm', which is not"),
    ({"spec": {"initContainers": [{"name": "pytorch", "image": "x"}]}},
     "two containers named 'pytorch'"),
    ({"spec": {"containers": [{"name": "pytorch", "volumeMounts": [
        {"name": "dshm", "mountPath": "/dev/shm/"}]}]}}, "mounts two volumes at"),
])
def test_overlay_merged_pod_is_checked(overlay, message):
    job = validate_job(spec_with(**{"spec.podTemplateOverlay": overlay}))
    with pytest.raises(SpecError) as err:
        render(job)
    assert any(p.startswith("spec.podTemplateOverlay: the merged pod") and message in p
               for p in err.value.problems), err.value.problems


def test_overlay_from_yaml_renders_and_refuses_misread_numbers():
    from kdist.rendering import to_yaml
    from kdist.spec import parse_job

    base = json.dumps(spec_with())[:-2]  # the document without its two closing braces
    text = base + ', "podTemplateOverlay": {"spec": {"activeDeadlineSeconds": 30, ' \
        '"containers": [{"name": "pytorch", "ports": [{"containerPort": 9000}]}]}}}}'
    out = to_yaml(render(parse_job(text)))  # YAML's own int type must not reach the dumper
    assert "containerPort: 9000" in out and "activeDeadlineSeconds: 30" in out
    with pytest.raises(SpecError, match="YAML reads 030 as the number 24"):
        parse_job(text.replace(": 30,", ": 030,"))


def test_overlay_field_lists_match_the_kubernetes_schema():
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    defs = json.loads((root / "v1.37.0-local-strict" / "_definitions.json").read_text())["$defs"]
    assert set(defs["io.k8s.api.core.v1.PodSpec"]["properties"]) == POD_SPEC_FIELDS
    assert set(defs["io.k8s.api.core.v1.Container"]["properties"]) == CONTAINER_FIELDS
