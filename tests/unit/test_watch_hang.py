"""The watch names the rank that hung (exit 204) and the whole-job restart count."""

from __future__ import annotations

from kdist.cli import progress
from kdist.kube.watch.tracker import Tracker
from kdist.shared import exitcodes

from .fixtures.handmade import batch_job, facts, idx, pod, running, terminated

HUNG_LINE = ("kdist.launch: rank 1 (node 1) hung: no rank of the job made progress for 10s "
             "(progressTimeoutSeconds=10; this node: rank 1 silent 10s); exiting 204: "
             f"{exitcodes.describe(exitcodes.HUNG)}")


def hung_pod() -> dict:
    p = pod("mnist-1-aaaaa", idx(1), 5, "Failed", terminated(exitcodes.HUNG, 20))
    p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "rank 1 hangs at step 5\n" + HUNG_LINE + "\n")
    return p


def test_a_hang_is_retryable_and_says_so():
    assert exitcodes.is_retryable(exitcodes.HUNG)
    assert exitcodes.HUNG not in exitcodes.CODE_ERRORS
    assert "hung" in exitcodes.describe(exitcodes.HUNG)


def test_the_warning_names_the_rank_that_hung():
    t = Tracker("mnist")
    warnings = t.feed("pods", "relist", [hung_pod()])
    said = [w for w in warnings if "exited with code 204" in w]
    assert len(said) == 1, warnings
    assert "rank 1 (node 1) hung: no rank of the job made progress for 10s" in said[0]


def test_status_says_what_restarted_the_job_and_how_many_restarts_of_how_many(capsys):
    t = Tracker("mnist")
    job = batch_job("mnist", 2, 3)
    job["metadata"]["annotations"] = facts(max_restarts=2)
    t.feed("job", "MODIFIED", job)
    new = pod("mnist-1-bbbbb", idx(1), 7, "Running", running(30), created=30)
    new["metadata"]["annotations"] = {"batch.kubernetes.io/job-index-failure-count": "1"}
    t.feed("pods", "relist", [hung_pod(), new])
    assert t.state.max_restarts == 2
    assert progress.restarts_text(t.state, ", ") == ", restart 1 of 2"
    progress.print_status(t.state)
    out = capsys.readouterr().out
    assert "restart 1 of 2" in out
    assert "restarted after rank 1 (pod mnist-1-aaaaa) exited with code 204: " in out
    assert "rank 1 (node 1) hung" in out


def test_no_restart_text_for_a_job_that_allows_none():
    t = Tracker("mnist")
    t.feed("job", "MODIFIED", batch_job("mnist", 2, 3))
    assert progress.restarts_text(t.state, "  ") == ""
