"""kubectl's habits: `list -o json|yaml|name|wide`, `status -o yaml`, and `-f FILE` for every
verb that names a job (its name, and its namespace when it sets one, from the job file)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.api import objects
from tests.api.checks import error_line
from tests.api.test_verbs import running_job

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def jobs(api):
    api.add(objects.job("alpha"), objects.pytorchjob("beta"),
            objects.job("elsewhere", namespace="team-b"))


def test_list_json_is_one_object_per_job(api, kdist, jobs):
    out = kdist("list", "-o", "json")
    assert out.code == 0, out.describe()
    rows = json.loads(out.stdout)
    assert [(r["name"], r["kind"], r["backend"]) for r in rows] == \
        [("alpha", "Job", "indexed-job"), ("beta", "PyTorchJob", "pytorchjob")]
    assert {"namespace", "nodes", "phase", "created", "ageSeconds"} <= set(rows[0])


def test_list_yaml_holds_what_json_holds(api, kdist, jobs):
    as_yaml = list(yaml.safe_load_all(kdist("list", "-o", "yaml", "-A").stdout))
    as_json = json.loads(kdist("list", "-o", "json", "-A").stdout)
    strip = [{k: v for k, v in r.items() if k != "ageSeconds"} for r in as_json]
    assert [{k: v for k, v in r.items() if k != "ageSeconds"} for r in as_yaml] == strip
    assert len(strip) == 3


def test_list_name_is_one_name_a_line(api, kdist, jobs):
    out = kdist("list", "-o", "name")
    assert out.code == 0 and out.stdout == "alpha\nbeta\n", out.describe()


def test_list_wide_adds_kind_created_and_namespace(api, kdist, jobs):
    out = kdist("list", "-o", "wide")
    assert out.code == 0, out.describe()
    header = out.stdout.splitlines()[0].split()
    assert header == ["NAMESPACE", "NAME", "BACKEND", "NODES", "PHASE", "AGE", "KIND", "CREATED"]
    assert "PyTorchJob" in out.stdout


def test_list_watch_refuses_an_output_format(api, kdist):
    out = kdist("list", "--watch", "-o", "json")
    error_line(out, 2, "-o")
    assert out.requests == []


def test_status_yaml_holds_what_json_holds(api, kdist):
    running_job(api, "old")
    as_json = json.loads(kdist("status", "old", "-o", "json").stdout)
    out = kdist("status", "old", "-o", "yaml")
    assert out.code == 0, out.describe()
    as_yaml = yaml.safe_load(out.stdout)
    assert as_yaml["name"] == "old" and as_yaml.keys() == as_json.keys()
    assert as_yaml["ranks"] == as_json["ranks"]


def test_delete_f_takes_the_name_from_the_job_file(api, kdist, spec):
    running_job(api, "demo")
    api.add(objects.job("bystander"))
    out = kdist("delete", "-f", str(spec))
    assert out.code == 0, out.describe()
    assert "deleted job.batch/demo, service/demo in namespace default" in out.stdout
    assert api.store.names("jobs") == ["bystander"]


def test_f_takes_the_namespace_the_file_sets(api, kdist, tmp_path):
    api.add(objects.job("demo", namespace="team-b"))
    spec = objects.job_yaml(tmp_path / "job.yaml", namespace="team-b")
    out = kdist("status", "-f", str(spec), "-o", "json")
    assert out.code == 0, out.describe()
    assert json.loads(out.stdout)["namespace"] == "team-b"
    refused = kdist("delete", "-f", str(spec), "-n", "other")
    error_line(refused, 2, "metadata.namespace is 'team-b' but -n says 'other'")
    assert refused.requests == []


def test_f_reads_standard_input_for_status_and_wait(api, kdist, spec):
    api.add(objects.job("demo", outcome="Complete"))
    out = kdist("status", "-f", "-", "-o", "json", input=spec.read_text())
    assert out.code == 0 and json.loads(out.stdout)["name"] == "demo", out.describe()
    out = kdist("wait", "-f", "-", input=spec.read_text())
    assert out.code == 0 and "job demo succeeded" in out.stdout, out.describe()


def test_logs_takes_filename_and_keeps_f_for_follow(api, kdist, spec):
    running_job(api, "demo")
    out = kdist("logs", "--filename", str(spec))
    assert out.code == 0 and "[rank 0]" in out.stdout, out.describe()


def test_name_and_file_together_are_refused_before_any_request(api, kdist, spec):
    for verb in ("status", "delete"):
        out = kdist(verb, "demo", "-f", str(spec))
        error_line(out, 2, "NAME or -f FILE")
        assert out.requests == []
    out = kdist("wait", "demo", "-f", str(spec))
    error_line(out, 2, "not both")


def test_a_bad_job_file_names_no_job(api, kdist, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kdist.dev/v1alpha1\nkind: TrainingJob\n")
    out = kdist("delete", "-f", str(bad))
    assert out.code == 2 and out.requests == [], out.describe()
    assert f"{bad}: metadata" in out.stderr or f"{bad}: spec" in out.stderr, out.describe()
