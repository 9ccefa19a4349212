"""JSON nested deeper than kdist reads is an answer like any other malformed one (issue 50).

Python's json recurses once per level, so 100,000 `[` (100 KiB, inside every size cap)
raised RecursionError, which seven places did not catch: `status`, `wait`,
`list --watch`, submit's watch after the job was created, `Client.status`,
`Client.train`'s error frames and `kdist check` each ended in a traceback. Every
text from a cluster or a worker now goes through one bounded reader
(`kdist.shared.jsonread`): exit 3 and one line, or the text ignored where kdist
only looks for its own lines in a log.
"""

from __future__ import annotations

import base64

import pytest

import kdist
from kdist.shared import facts, frames, jsonread, ledgerread, records
from kdist.shared.errors import KdistError
from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import Raw
from tests.api.test_train_result import finish_with
from tests.api.test_verbs import running_job

pytestmark = pytest.mark.timeout(120)

DEEP = Raw("[" * 100_000)
DEEP_OBJECT = Raw('{"a":' * 50_000)
JOBS = "/apis/batch/v1/namespaces/default/jobs"
DEPTH_WORDS = ("malformed answer", f"nested more than {jsonread.MAX_DEPTH} deep")


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT], ids=["lists", "objects"])
def test_status_of_a_job_whose_answer_nests_too_deeply(api, kdist, text):
    running_job(api, "demo")
    api.answer(text, method="GET", path=f"{JOBS}/demo$")
    out = kdist("status", "demo")
    error_line(out, 3, *DEPTH_WORDS, f"GET {JOBS}/demo")


@pytest.mark.parametrize("verb", [["wait", "demo", "--timeout", "20"], ["list", "--watch"]],
                         ids=["wait", "list --watch"])
def test_a_watch_event_that_nests_too_deeply(api, kdist, verb):
    running_job(api, "demo")
    api.script_watch("jobs", [DEEP])
    out = kdist(*verb)
    error_line(out, 3, *DEPTH_WORDS, "a watch event on")


def test_submits_watch_after_the_job_was_created(api, kdist, spec):
    api.script_watch("jobs", [DEEP])
    out = kdist("submit", "--timeout", "20", str(spec))
    error_line(out, 3, *DEPTH_WORDS, "a watch event on")
    assert api.store.names("jobs") == ["demo"], "the job was created before the watch"


def test_a_list_answer_that_nests_too_deeply(api, kdist):
    running_job(api, "demo")
    api.answer(DEEP, method="GET", path=f"{JOBS}$", watch=False)
    out = kdist("list")
    error_line(out, 3, *DEPTH_WORDS)


def test_an_error_answer_that_nests_too_deeply_is_still_its_status(api, kdist):
    api.answer(DEEP, code=500, method="GET", path=f"{JOBS}/demo$")
    out = kdist("status", "demo")
    error_line(out, 3, "500")


def test_client_status(api, kubeconfig):
    running_job(api, "demo")
    api.answer(DEEP, method="GET", path=f"{JOBS}/demo$")
    with pytest.raises(KdistError) as raised:
        kdist.Client(kubeconfig=kubeconfig).status("demo")
    message = str(raised.value)
    assert "\n" not in message and "nested more than" in message, message


def test_client_train_reads_past_an_error_frame_that_nests_too_deeply(api, kubeconfig):
    """A KDIST-ERROR line is the worker's text: too deep, it is no error frame, and the
    value rank 0 handed back still comes back."""
    deep = frames.ERROR + " " + base64.b64encode(b"[" * 12_000).decode()
    assert len(deep) < frames.MAX_ERROR_CHARS * 2 + 20  # within the frame's own bound
    value = {"loss": 0.25}
    finish_with(api, "\n".join([deep, *frames.result_lines(value)]) + "\n")

    def fit() -> dict:
        return {}

    got = kdist.Client(kubeconfig=kubeconfig).train(fit, nodes=2, name="demo", logs=False,
                                                    timeout=30, image="img:1")
    assert got == value


def test_check_with_a_probe_answer_that_nests_too_deeply(api, kdist):
    api.answer(DEEP, code=201, method="POST", path="selfsubjectreviews")
    out = kdist("check")
    assert out.crash is None and "Traceback" not in out.stderr, out.describe()
    assert out.code == 1, out.describe()  # a required check failed
    failed = [line for line in out.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and all(w in failed[0] for w in DEPTH_WORDS), out.describe()
    assert "selfsubjectreviews" in failed[0], out.describe()


def test_annotations_that_nest_too_deeply_are_not_kdists(api, kdist):
    """The ledger and facts annotations are read as unknown, the rest of status shown."""
    job = running_job(api, "demo")
    job["metadata"].setdefault("annotations", {}).update(
        {"kdist.dev/ledger": '{"restarts": ' + "[" * 30_000,
         "kdist.dev/facts": "[" * 4000})
    api.store.update(job)
    out = kdist("status", "demo")
    assert out.code == 0 and out.crash is None, out.describe()
    assert "demo" in out.stdout, out.describe()


def test_a_worker_line_that_nests_too_deeply_is_no_record(api, kdist):
    job = running_job(api, "demo")
    api.set_log("demo-0-abcde", '{"event": "step", "x": ' + "[" * 100_000 + "\n"
                + objects.step_log(0))
    out = kdist("status", "demo")
    assert out.code == 0 and out.crash is None, out.describe()
    assert job["metadata"]["name"] == "demo"


def test_the_reader_refuses_what_it_cannot_bound():
    for text in (DEEP, DEEP_OBJECT, "[" * 101 + "]" * 101):
        with pytest.raises(jsonread.OutOfBounds):
            jsonread.loads(text, limit=1 << 20)
    assert jsonread.loads("[" * 100 + "]" * 100, limit=1 << 20) is not None
    with pytest.raises(jsonread.OutOfBounds):
        jsonread.loads("[1, 2]", limit=5)
    assert jsonread.loads('{"a": "[[[[[[["}', limit=100) == {"a": "[[[[[[["}


def test_kdists_readers_of_worker_and_annotation_text_ignore_it():
    assert records.parse_record('[rank0]: {"event": "step", "x": ' + DEEP) is None
    assert ledgerread.read('{"restarts": ' + "[" * 30_000).ledger is None
    assert facts.read({facts.ANNOTATION: "[" * 4000}).max_steps is None
    watcher = frames.Frames()
    assert watcher.feed(frames.ERROR + " " + base64.b64encode(b"[" * 12_000).decode())
    assert watcher.errors == []

