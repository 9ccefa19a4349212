"""`kdist logs NAME` (and `Client.rank_logs`) where one rank's log cannot be read.

At 1,000 kwok nodes pods/log answers 500 (kwok's pods have no node to read from);
a real cluster answers 500, 502 or 404 for a pod whose node is gone, 400 for a
container not started. That rank is skipped with one line naming it, its pod and
the answer, the other ranks' logs follow, and the command ends non-zero (exit 3)
saying how many ranks' logs could not be read. A 403 still ends it at once.
"""

from __future__ import annotations

import pytest

from kdist import Client
from kdist.shared.errors import ClusterError
from tests.api import objects
from tests.api.checks import error_line
from tests.api.wireapi import WireApi

FAKEAPI_CLASS = WireApi

pytestmark = pytest.mark.timeout(60)


def _job(api, nodes: int = 3) -> None:
    job = api.add(objects.job("demo", nodes=nodes))[0]
    for rank in range(nodes):
        api.add(objects.pod(job, rank))
        api.set_log(f"demo-{rank}-abcde", objects.step_log(rank, world=nodes))


def _printed(stdout: str, rank: int) -> list[str]:
    prefix = f"[rank {rank}] "
    return [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("code", [500, 502, 404, 400])
def test_a_rank_whose_log_is_refused_is_skipped(api, kdist, code):
    _job(api)
    api.fail(code, message="no node to read the log from", path="demo-1-abcde/log")
    out = kdist("logs", "demo")
    error_line(out, 3, "1 of 3", "could not be read")
    for rank in (0, 2):  # every line of the ranks around it, in order
        assert _printed(out.stdout, rank) == objects.step_log(rank, world=3).splitlines(), \
            out.describe()
    assert _printed(out.stdout, 1) == [], out.describe()
    said = [line for line in out.stderr.splitlines() if line.startswith("[rank 1] ")]
    assert len(said) == 1, out.describe()
    assert "demo-1-abcde" in said[0] and "not readable" in said[0], out.describe()
    if code != 404:  # a 404 is said as the pod (its log) not being there
        assert str(code) in said[0], out.describe()


def test_a_log_cut_off_keeps_its_lines_and_the_others_follow(api, kdist):
    _job(api, nodes=2)
    api.cuts[("default", "demo-0-abcde")] = 2
    out = kdist("logs", "demo")
    error_line(out, 3, "1 of 2", "could not be read")
    assert _printed(out.stdout, 0) == objects.step_log(0, world=2).splitlines()[:2], \
        out.describe()
    assert _printed(out.stdout, 1) == objects.step_log(1, world=2).splitlines(), out.describe()
    said = [line for line in out.stderr.splitlines() if line.startswith("[rank 0] ")]
    assert len(said) == 1 and "cut off after 2 lines" in said[0] and "demo-0-abcde" in said[0], \
        out.describe()


def test_a_forbidden_log_still_ends_at_once(api, kdist):
    """A 403 is no rank's own: every rank's log would be refused alike."""
    _job(api)
    api.fail(403, message='User "dev" cannot get resource "pods/log"', path="/log")
    out = kdist("logs", "demo")
    error_line(out, 3, "forbidden: get pods/log")
    assert [r.path for r in out.requests if r.path.endswith("/log")] == \
        ["/api/v1/namespaces/default/pods/demo-0-abcde/log"], out.describe()
    assert out.stdout == "", out.describe()


def test_rank_logs_notes_a_refused_rank(api, kubeconfig):
    _job(api)
    api.fail(500, message="no node to read the log from", path="demo-1-abcde/log")
    got = Client(kubeconfig=kubeconfig).rank_logs("demo")
    assert [(e.rank, e.lines) for e in got] == [
        (0, objects.step_log(0, world=3).splitlines()), (1, []),
        (2, objects.step_log(2, world=3).splitlines())]
    assert "demo-1-abcde" in got[1].note and "500" in got[1].note, got[1].note
    assert got[0].note == got[2].note == ""




def test_follow_goes_on_past_a_refused_log(api, kdist):
    """-f: the refused pod's log is tried again a few times, then one warning names the
    pod and the answer; the other pods' logs are followed to the job's end."""
    job = api.add(objects.job("done", outcome="Complete"))[0]
    api.add(objects.pod(job, 0, exit_code=0), objects.pod(job, 1, exit_code=0))
    for rank in (0, 1):
        api.set_log(f"done-{rank}-abcde", objects.step_log(rank))
    api.fail(500, message="no node to read the log from", path="done-0-abcde/log")
    out = kdist("logs", "-f", "done")
    assert out.code == 0, out.describe()  # the job's outcome, as ever with -f
    assert _printed(out.stdout, 1) == objects.step_log(1).splitlines(), out.describe()
    warned = [line for line in out.stderr.splitlines() if "done-0-abcde" in line]
    assert len(warned) == 1 and "answered 500" in warned[0], out.describe()


def test_client_logs_go_on_past_a_refused_rank(api, kubeconfig):
    """`Client.logs` (not following): the refused rank is told to `on_note`, the others'
    lines follow; without `on_note`, a ClusterError after the last line says which."""
    _job(api)
    api.fail(500, message="no node to read the log from", path="demo-1-abcde/log")
    client, notes = Client(kubeconfig=kubeconfig), []
    got = list(client.logs("demo", on_note=lambda rank, why: notes.append((rank, why))))
    assert got == [(rank, line) for rank in (0, 2)
                   for line in objects.step_log(rank, world=3).splitlines()]
    assert len(notes) == 1 and notes[0][0] == 1 and "demo-1-abcde" in notes[0][1] \
        and "500" in notes[0][1], notes
    seen = []
    with pytest.raises(ClusterError, match=r"rank 1 .*demo-1-abcde.*500"):
        for rank, _ in client.logs("demo"):
            seen.append(rank)
    assert set(seen) == {0, 2}, seen


def test_a_server_that_answers_no_log_read_ends_them_after_a_few(api, kdist):
    """Issue 53: a server that accepts every log read and answers none would cost a request
    timeout per rank (1,000 of them at scale); after STALLED_READS in a row it ends."""
    from kdist.api.ranklogs import STALLED_READS

    _job(api, nodes=6)
    api.hang(path="/log")
    out = kdist("logs", "demo", env={"KDIST_REQUEST_TIMEOUT": "1"})
    error_line(out, 3, f"answered none of the last {STALLED_READS} ranks' log reads",
               "the other ranks' logs were not read")
    reads = [r for r in out.requests if r.path.endswith("/log")]
    assert len(reads) == STALLED_READS, out.describe()


def test_timeouts_not_in_a_row_are_each_a_ranks_own(api, kubeconfig):
    """Two timeouts, an answered rank, two more: never STALLED_READS in a row (an answer
    starts the count again), so every rank is read or noted and nothing raises."""
    _job(api, nodes=5)
    for rank in (0, 1, 3, 4):
        api.hang(path=f"demo-{rank}-abcde/log")
    got = Client(kubeconfig=kubeconfig, request_timeout=1).rank_logs("demo")
    assert got[2].lines == objects.step_log(2, world=5).splitlines(), got[2]
    assert all("did not answer" in got[r].note and not got[r].lines for r in (0, 1, 3, 4)), got
