"""`kdist submit a.yaml b.yaml`: one batch, all or nothing, every outcome saying what exists.

The contract (docs/security.md, "Bad input never reaches the API server"): every file is
validated, namespaces resolved and code packed before any request; the same job
twice is refused (exit 2, nothing sent); if one job fails, the jobs this batch
created are deleted again and the error line names them; what --replace deleted
before cannot come back, and the line says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.test_verbs import JOBS, running_job

pytestmark = pytest.mark.timeout(60)


def two(tmp_path: Path, a_ns: str | None = None, b_ns: str | None = None,
        b_name: str = "beta") -> tuple[Path, Path]:
    return (objects.job_yaml(tmp_path / "a.yaml", "alpha", namespace=a_ns),
            objects.job_yaml(tmp_path / "b.yaml", b_name, namespace=b_ns))


def quota_after_first_job(api) -> None:
    """The first job is created; every later one is refused as over quota (a 403)."""
    api.after_create["jobs"] = lambda job: api.fail(
        403, message='jobs "x" is forbidden: exceeded quota: team-quota', method="POST",
        path="/jobs")


# ---- the same job twice ---------------------------------------------------------------------


@pytest.mark.parametrize("global_flags,flags,a_ns,b_ns", [
    ([], [], "default", None),  # one names the namespace, one relies on the context's
    (["-n", "default"], [], "default", None),
    ([], ["--replace"], None, "default"),
    ([], ["--dry-run=server"], "default", None),
])
def test_the_same_job_in_two_files_is_refused_before_any_request(api, kdist, tmp_path,
                                                                  global_flags, flags, a_ns,
                                                                  b_ns):
    a, b = two(tmp_path, a_ns, b_ns, b_name="alpha")
    out = kdist(*global_flags, "submit", "--no-wait", *flags, str(a), str(b))
    error_line(out, 2, str(b), "job alpha in namespace default", str(a))
    assert out.requests == [], out.describe()


def test_the_same_name_in_two_namespaces_is_two_jobs(api, kdist, tmp_path):
    api.store.namespaces.add("team-b")
    a, b = two(tmp_path, None, "team-b", b_name="alpha")
    out = kdist("submit", "--no-wait", str(a), str(b))
    assert out.code == 0, out.describe()
    assert api.store.alive("jobs") == ["alpha"] and api.store.alive("jobs", "team-b") == ["alpha"]


def test_the_context_namespace_counts(api, kdist, tmp_path):
    """The kubeconfig's context says namespace team-a: a file naming team-a is the same job
    as one that names none."""
    from tests.api.kubeconfigs import write_kubeconfig

    kc = write_kubeconfig(tmp_path / "kc", api.url, namespace="team-a")
    a, b = two(tmp_path, "team-a", None, b_name="alpha")
    out = kdist("submit", "--no-wait", str(a), str(b), kubeconfig=kc)
    error_line(out, 2, "job alpha in namespace team-a")
    assert out.requests == [], out.describe()


# ---- one job fails: the batch is undone -----------------------------------------------------


def test_a_job_refused_half_way_undoes_the_batch(api, kdist, tmp_path):
    quota_after_first_job(api)
    a, b = two(tmp_path)
    out = kdist("submit", "--no-wait", str(a), str(b))
    line = error_line(out, 3, str(b), "exceeded quota", f"deleted job alpha ({a})",
                      "no job of this batch exists")
    assert "--replace" not in line, out.describe()
    assert api.store.alive("jobs") == [], "the first job must not be left running"
    assert ("DELETE", f"{JOBS}/alpha") in out.calls, out.describe()


def test_with_replace_the_line_says_what_cannot_come_back(api, kdist, tmp_path):
    old_a, old_b = running_job(api, "alpha"), running_job(api, "beta")
    quota_after_first_job(api)
    a, b = two(tmp_path)
    out = kdist("submit", "--replace", "--no-wait", str(a), str(b))
    error_line(out, 3, str(b), "exceeded quota", f"deleted job alpha ({a})",
               "--replace had deleted job.batch/alpha", "job.batch/beta", "not restored",
               "no job of this batch exists")
    assert api.store.alive("jobs") == []
    assert old_a and old_b


def test_a_rollback_that_fails_names_what_is_left(api, kdist, tmp_path):
    quota_after_first_job(api)
    api.fail(403, message="deletes are not allowed", method="DELETE")
    a, b = two(tmp_path)
    out = kdist("submit", "--no-wait", str(a), str(b))
    line = error_line(out, 3, str(b), "exceeded quota", "could not delete job alpha",
                      "deletes are not allowed")
    assert "no job of this batch exists" not in line, out.describe()
    assert api.store.alive("jobs") == ["alpha"]


def test_a_server_dry_run_batch_that_fails_persisted_nothing(api, kdist, tmp_path):
    api.fail(403, message="exceeded quota", method="POST", path="/jobs")
    a, b = two(tmp_path)
    out = kdist("submit", "--dry-run=server", str(a), str(b))
    error_line(out, 3, str(a), "exceeded quota", "nothing was persisted")
    assert not any(r.method == "DELETE" for r in out.requests), out.describe()


def test_a_batch_that_succeeds_creates_each_job_once(api, kdist, tmp_path):
    a, b = two(tmp_path)
    out = kdist("submit", "--no-wait", str(a), str(b))
    assert out.code == 0, out.describe()
    assert out.stdout.count("created in namespace default") == 2, out.describe()
    assert api.store.alive("jobs") == ["alpha", "beta"]
