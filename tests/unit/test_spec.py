"""Validation: every malformed spec is refused with its file, field path and reason."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from kdist.shared.errors import SpecError
from kdist.spec import load_job, parse_job, validate_job
from tests.unit.helpers import DELETE, spec_with, write_spec


def problems(doc) -> list[str]:
    with pytest.raises(SpecError) as e:
        validate_job(doc, "job.yaml")
    return e.value.problems


def test_minimal_spec_gets_defaults():
    job = validate_job(spec_with(), "job.yaml")
    s = job.spec
    assert s.backend == "indexed-job"
    assert s.procs_per_node == 1
    assert s.distributed.port == 29500 and s.distributed.max_restarts == 0
    assert s.dist_backend == "gloo"
    assert s.resources.gpus == 0 and s.ttl_seconds_after_finished == 3600


def test_gpus_make_auto_backend_nccl():
    job = validate_job(spec_with(**{"spec.resources": {"gpus": 2}}), "job.yaml")
    assert job.spec.dist_backend == "nccl"


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"metadata.name": "9lives"}, "metadata.name", "DNS-1035"),
        ({"metadata.name": "Upper"}, "metadata.name", "DNS-1035"),
        ({"metadata.name": "a" * 51}, "metadata.name", "at most 50"),
        ({"metadata.name": "trailing-"}, "metadata.name", "DNS-1035"),
        ({"metadata.name": "dot.ted"}, "metadata.name", "DNS-1035"),
        ({"metadata.namespace": "Bad_NS"}, "metadata.namespace", "DNS-1123"),
        ({"metadata.labels": {"kdist.dev/job-name": "x"}}, "metadata.labels", "set by kdist"),
        ({"metadata.labels": {"team": "a b"}}, "metadata.labels", "value"),
        ({"metadata.labels": {"-bad": "x"}}, "metadata.labels", "label key"),
        ({"metadata.labels": {"team": "x" * 64}}, "metadata.labels", "63"),
        ({"apiVersion": "kdist/v1"}, "apiVersion", "kdist/v1alpha1"),
        ({"kind": "Job"}, "kind", "TrainingJob"),
        ({"spec.backend": "mpijob"}, "spec.backend", "indexed-job"),
        ({"spec.image": ""}, "spec.image", "image"),
        ({"spec.image": "has space:1"}, "spec.image", "image"),
        ({"spec.image": DELETE}, "spec.image", "is required"),
        ({"spec.nodes": 0}, "spec.nodes", ">= 1"),
        ({"spec.nodes": 1001}, "spec.nodes", "<= 1000"),
        ({"spec.nodes": "2"}, "spec.nodes", "integer"),
        ({"spec.nodes": 2.5}, "spec.nodes", "integer"),
        ({"spec.nodes": True}, "spec.nodes", "integer"),
        ({"spec.procsPerNode": 0}, "spec.procsPerNode", '"auto"'),
        ({"spec.procsPerNode": "many"}, "spec.procsPerNode", '"auto"'),
        ({"spec.workload": {"module": "a", "command": ["b"]}}, "spec.workload", "exactly one"),
        ({"spec.workload": {}}, "spec.workload", "exactly one"),
        ({"spec.workload": {"module": "not a module"}}, "spec.workload.module", "module"),
        ({"spec.workload": {"command": []}}, "spec.workload.command", "non-empty"),
        ({"spec.workload": {"module": "m", "args": "--x"}}, "spec.workload.args", "list"),
        ({"spec.distributed": {"backend": "mpi"}}, "spec.distributed.backend", "gloo"),
        ({"spec.distributed": {"backend": "nccl"}}, "spec", "nccl needs resources.gpus"),
        ({"spec.distributed": {"port": 80}}, "spec.distributed.port", ">= 1024"),
        ({"spec.distributed": {"port": 70000}}, "spec.distributed.port", "<= 65535"),
        ({"spec.distributed": {"maxRestarts": -1}}, "spec.distributed.maxRestarts", ">= 0"),
        ({"spec.distributed": {"rendezvousTimeoutSeconds": 0}},
         "spec.distributed.rendezvousTimeoutSeconds", ">= 1"),
        ({"spec.distributed": {"collectiveTimeoutSeconds": "5m"}},
         "spec.distributed.collectiveTimeoutSeconds", "integer"),
        ({"spec.resources": {"gpus": -1}}, "spec.resources.gpus", ">= 0"),
        ({"spec.resources": {"cpu": "lots"}}, "spec.resources.cpu", "quantity"),
        ({"spec.resources": {"cpu": "-1"}}, "spec.resources.cpu", "quantity"),
        ({"spec.resources": {"cpu": "0"}}, "spec.resources.cpu", "at least 1m"),
        ({"spec.resources": {"memory": "4GB"}}, "spec.resources.memory", "quantity"),
        ({"spec.resources": {"memory": "1Gi", "shm": "2Gi"}}, "spec.resources", "exceeds memory"),
        ({"spec.resources": {"gpus": 1}, "spec.procsPerNode": 2}, "spec", "exceeds resources.gpus"),
        ({"spec.resources": {"memroy": "1Gi"}}, "spec.resources.memroy", "did you mean 'memory'"),
        ({"spec.env": {"RANK": "1"}}, "spec.env.RANK", "set by kdist"),
        ({"spec.env": {"KDIST_NNODES": "1"}}, "spec.env.KDIST_NNODES", "set by kdist"),
        ({"spec.env": {"1BAD": "1"}}, "spec.env", "environment variable name"),
        ({"spec.env": {"FLAG": True}}, "spec.env.FLAG", "quote it"),
        ({"spec.env": {"NESTED": {"a": 1}}}, "spec.env.NESTED", "string"),
        ({"spec.envFrom": [{"secretRef": {"name": "a"}, "configMapRef": {"name": "b"}}]},
         "spec.envFrom[0]", "exactly one"),
        ({"spec.envFrom": [{"secretRef": {"name": "Bad Name"}}]},
         "spec.envFrom[0].secretRef.name", "DNS-1123"),
        ({"spec.checkpoint": {"path": "relative/dir", "volume": {"emptyDir": {}}}},
         "spec.checkpoint.path", "absolute"),
        ({"spec.checkpoint": {"path": "/ckpt/../etc", "volume": {"emptyDir": {}}}},
         "spec.checkpoint.path", ".."),
        ({"spec.checkpoint": {"path": "/dev/shm", "volume": {"emptyDir": {}}}},
         "spec.checkpoint.path", "system"),
        ({"spec.checkpoint": {"path": "/ckpt"}}, "spec.checkpoint.volume", "is required"),
        ({"spec.checkpoint": {"path": "/c", "volume": {"hostPath": {"path": "/"}}}},
         "spec.checkpoint.volume.hostPath", "unknown field"),
        ({"spec.checkpoint": {"path": "/c", "volume": {}}},
         "spec.checkpoint.volume", "exactly one"),
        ({"spec.scheduling": {"tolerations": [{"operator": "Equal"}]}},
         "spec.scheduling.tolerations[0]", "without key"),
        ({"spec.scheduling": {"queue": "bad queue"}}, "spec.scheduling.queue", "DNS-1123"),
        ({"spec.scheduling": {"priorityClassName": "Nope!"}},
         "spec.scheduling.priorityClassName", "DNS-1123"),
        ({"spec.ttlSecondsAfterFinished": -5}, "spec.ttlSecondsAfterFinished", ">= 0"),
        ({"spec.activeDeadlineSeconds": -1}, "spec.activeDeadlineSeconds", ">= 0"),
        ({"spec.replicas": 2}, "spec.replicas", "unknown field"),
    ],
)
def test_malformed_field_is_named(changes, path, fragment):
    found = problems(spec_with(**changes))
    assert any(p.startswith(f"job.yaml: {path}") and fragment in p for p in found), found


def test_every_problem_reported_at_once():
    found = problems(spec_with(**{
        "metadata.name": "Bad", "spec.nodes": 0, "spec.resources": {"gpus": -1},
        "spec.env": {"RANK": "0", "GOOD": "x", "bad name": "y"},
    }))
    paths = {p.split(": ")[1] for p in found}
    assert {"metadata.name", "spec.nodes", "spec.resources.gpus", "spec.env.RANK",
            "spec.env['bad name']"} <= paths, found


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty"),
        (b"# only a comment\n", "empty"),
        (b"- a\n- b\n", "expected a mapping"),
        (b"just a string", "expected a mapping"),
        (b"a: [1, 2\n", "invalid YAML"),
        (b"\x00\x01\x02binary", "binary"),
        (b"\xff\xfe\xfa not utf8", "UTF-8"),
        (b"a: 1\n---\nb: 2\n", "one TrainingJob per file (found 2 documents)"),
        (b"a: 1\na: 2\n", "duplicate key 'a'"),
        (b"a: &x [*x]\n", "recursive"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper"),
    ],
)
def test_unreadable_files_fail_cleanly(tmp_path, content, fragment):
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as e:
        load_job(path)
    (problem,) = e.value.problems
    assert problem.startswith(f"{path}: ") and fragment in problem, problem


def test_alias_bomb_is_refused_fast_and_small(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    path = write_spec(tmp_path, "\n".join(lines) + "\n")
    # CPU time, not wall time: the bound is the parser's work, whatever else the machine does.
    start = time.process_time()
    with pytest.raises(SpecError) as e:
        load_job(path)
    assert time.process_time() - start < 2.0
    assert "alias bomb" in e.value.problems[0]


def test_oversized_file_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * (2 << 20))
    with pytest.raises(SpecError) as e:
        load_job(path)
    assert "larger than" in e.value.problems[0]


def test_missing_file_and_directory(tmp_path):
    for path in (tmp_path / "nope.yaml", tmp_path):
        with pytest.raises(SpecError) as e:
            load_job(path)
        assert e.value.problems[0].startswith(f"{path}: cannot read")


def test_small_aliases_still_work():
    job = parse_job(
        b"apiVersion: kdist/v1alpha1\nkind: TrainingJob\nmetadata: {name: a, labels: &l {t: v}}\n"
        b"spec:\n  image: i\n  workload: {module: m}\n  scheduling: {nodeSelector: *l}\n"
    )
    assert job.spec.scheduling.node_selector == {"t": "v"}


def test_numbers_become_strings_where_kubernetes_wants_them():
    job = validate_job(spec_with(**{
        "spec.resources": {"cpu": 2, "memory": "4Gi"}, "spec.env": {"SEED": 7},
        "spec.workload": {"module": "m", "args": ["--lr", 0.1]},
    }))
    assert job.spec.resources.cpu == "2"
    assert job.spec.env == {"SEED": "7"}
    assert job.spec.workload.args == ["--lr", "0.1"]


def test_model_is_frozen():
    job = validate_job(spec_with())
    with pytest.raises(ValidationError):
        job.spec.nodes = 3  # type: ignore[misc]
