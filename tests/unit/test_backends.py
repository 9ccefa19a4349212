"""The backends registry: each training kind's knowledge in its own module, asked by the rest."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kdist import backends
from kdist.backends import base
from kdist.kube import kinds
from kdist.kube.watch import objects
from kdist.rendering import render, with_backend
from kdist.rendering.addons import RULES
from kdist.shared import facts
from kdist.spec import load_job
from kdist.spec.schema import job_schema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp-cpu.yaml"
# Words that name a training kind's own fields or labels: only kdist/backends/ may say them.
KIND_FIELDS = re.compile(r"pytorchReplicaSpecs|replicatedJobs|completionMode|backoffLimitPerIndex"
                         r"|runPolicy|training\.kubeflow\.org/|jobset\.sigs\.k8s\.io/|"
                         r"replica-type|\bsuccessPolicy\b|\bfailurePolicy\b")


def test_no_module_outside_the_backends_names_a_kinds_fields():
    named = [f"{p.relative_to(ROOT)}:{n}"
             for p in sorted((ROOT / "kdist").rglob("*.py")) if "backends" not in p.parts
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if KIND_FIELDS.search(line)]
    assert named == []


def test_every_backend_is_whole_and_the_registry_is_consistent():
    assert len(set(backends.NAMES)) == len(backends.BACKENDS) and backends.DEFAULT == "indexed-job"
    templates = ROOT / "kdist" / "backends" / "templates"
    for b in backends.BACKENDS:
        assert isinstance(b, base.Backend)
        assert all((templates / t).is_file() for t in b.templates), b.name
        assert backends.get(b.name) is b and backends.of_kind(b.kind.kind) is b
        assert b.terminal and b.rbac and b.shape and b.summary
        assert b.kind in kinds.TRAINING and kinds.BY_KIND[b.kind.kind] is b.kind
        for rule in b.rbac:
            assert rule in RULES
        assert (b.in_place_restarts or b.no_in_place_why) and (b.native_gang or b.no_gang_why)


def test_the_spec_and_the_cli_offer_exactly_the_registrys_backends():
    from click.testing import CliRunner

    from kdist.cli.main import main

    enum = job_schema()["definitions"]["JobSpec"]["properties"]["backend"]["enum"]
    assert tuple(enum) == backends.NAMES
    res = CliRunner().invoke(main, ["render", str(EXAMPLE), "--backend", "no-such-kind"])
    assert res.exit_code == 2 and all(n in res.output for n in backends.NAMES)


@pytest.mark.parametrize("name", backends.NAMES)
def test_what_is_rendered_reads_back_through_its_backend(name):
    job = with_backend(load_job(EXAMPLE), name)
    rendered = render(job)
    obj = rendered[0]
    b = backends.of(obj)
    assert b.name == name and objects.job_kind_backend(obj) == (b.kind.kind, name)
    assert objects.checked_job_nodes(obj) == job.spec.nodes
    # The training object's pod templates, or those of what it is built from (created first).
    held = [t for o in rendered if backends.holding(o["kind"]) is b for t in b.pod_templates(o)]
    assert len(held) >= 1 and (b.created_first or objects.job_pod_templates(obj) == held)
    said = facts.read(obj["metadata"]["annotations"])
    assert (said.max_steps, said.max_restarts, said.procs_per_node) == (
        60, job.spec.distributed.max_restarts, job.spec.procs_per_node)
    assert objects.pod_selector(obj) == f"kdist.dev/job-name={job.metadata.name}"


def test_the_facts_annotation_refuses_what_kdist_does_not_write():
    bad = {facts.ANNOTATION: json.dumps({"maxSteps": "60", "maxRestarts": -1,
                                          "procsPerNode": True, "codeSha256": "x" * 64})}
    said = facts.read(bad)
    assert (said.max_steps, said.max_restarts, said.procs_per_node, said.code) == (
        None, None, None, "")
    assert facts.read({facts.ANNOTATION: "{not json"}) == facts.Facts()
    assert facts.read(None).procs_per_node == 1  # not said: the spec's default
    auto = facts.Facts(procs_per_node=None).encode()
    assert facts.read({facts.ANNOTATION: auto}).procs_per_node is None  # "auto"


def test_a_jobsets_child_job_and_pods_pass_the_kubernetes_schema_and_restricted():
    import kubernetes_validate

    from tests.unit import restricted

    obj = render(with_backend(load_job(EXAMPLE), "jobset"))[0]
    (node,) = obj["spec"]["replicatedJobs"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp-cpu-node-0"},
           "spec": node["template"]["spec"]}
    kubernetes_validate.validate(job, "1.37", strict=True)
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["completions"] == 2
    for spec in restricted.pod_specs(obj):
        assert restricted.violations(spec) == []
    # Node 0's name: the Job <name>-node-0's pod of index 0, behind the JobSet's Service.
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["KDIST_MASTER_ADDR"] == "ddp-cpu-node-0-0.ddp-cpu"
    refs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in spec["containers"][0]["env"] if "valueFrom" in e}
    assert refs["KDIST_RESTART_COUNT"] == "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"
    rules = obj["spec"]["failurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJobSet" and "PodFailurePolicy" in rules[0][
        "onJobFailureReasons"]


@pytest.mark.parametrize("name", backends.NAMES)
def test_what_a_kind_is_built_from_is_printed_and_created_first(name):
    """`kubectl apply -f` of `kdist render` makes objects in the order printed: a TrainJob's
    runtime must exist when the TrainJob is admitted; every other kind keeps its order."""
    import yaml

    from kdist.rendering import to_yaml

    objects = render(with_backend(load_job(EXAMPLE), name))
    order = backends.creation_order(objects)
    first = {k.kind for k in backends.get(name).created_first}
    assert sorted(order) == list(range(len(objects)))
    printed = [d["kind"] for d in yaml.safe_load_all(to_yaml(objects)) if d]
    assert printed == [objects[i]["kind"] for i in order]
    if first:
        assert printed[:len(first)] == sorted(first) and objects[0]["kind"] == name_kind(name)
    else:
        assert order == list(range(len(objects)))


def name_kind(name: str) -> str:
    return backends.get(name).kind.kind
