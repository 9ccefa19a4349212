"""`kdist.Client` against the fake API: arguments refused before any request (with the
CLI's words), the target held once, logs streamed as (rank, line) across a restart,
and the step series per rank."""

from __future__ import annotations

import copy
import math

import pytest

import kdist
from kdist.shared.errors import JobNotFound, UsageError
from tests.api import objects
from tests.api.checks import error_line

pytestmark = pytest.mark.timeout(60)
NAN = float("nan")


@pytest.fixture
def client(kubeconfig):
    return kdist.Client(kubeconfig=kubeconfig)


def ended_pod(job, rank: int, exit_code: int, name: str | None = None, earlier: int = 0):
    pod = objects.pod(job, rank, exit_code=exit_code)
    if name is not None:
        pod = copy.deepcopy(pod)
        pod["metadata"]["name"] = name
        pod["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] = \
            str(earlier)
    return pod


def complete(api, job, outcome: str = "Complete") -> None:
    stored = api.store.get_stored("jobs", job["metadata"]["name"])
    api.store.update(dict(stored, status={"conditions": [{"type": outcome, "status": "True"}]}))


# ---- arguments: refused before any request ----------------------------------------------

BAD_CALLS = {
    "wait timeout=nan": (lambda c: c.wait("demo", timeout=NAN), "timeout", "nan"),
    "wait timeout=-1": (lambda c: c.wait("demo", timeout=-1), "timeout", "-1"),
    "wait timeout text": (lambda c: c.wait("demo", timeout="10"), "timeout", "'10'"),
    "wait_many a string": (lambda c: c.wait_many("abc"), "names", "'abc'"),
    "wait_many timeout=inf": (lambda c: c.wait_many(["a"], timeout=math.inf), "timeout", "inf"),
    "wait_many selector bytes": (lambda c: c.wait_many(selector=b"a=b"), "selector", "b'a=b'"),
    "logs tail=-5": (lambda c: c.logs("demo", tail=-5), "tail", "-5"),
    "logs tail=True": (lambda c: c.logs("demo", tail=True), "tail", "True"),
    "logs ranks text": (lambda c: c.logs("demo", ranks="0"), "ranks", "'0'"),
    "logs ranks=[-1]": (lambda c: c.logs("demo", ranks=[-1]), "ranks", "-1"),
    "rank_logs rank=1.5": (lambda c: c.rank_logs("demo", rank=1.5), "rank", "1.5"),
    "delete(5)": (lambda c: c.delete(5), "name", "5"),
    "delete timeout=0": (lambda c: c.delete("demo", timeout=0), "timeout", "0"),
    "delete wait=1": (lambda c: c.delete("demo", wait=1), "wait", "1"),
    "status(None)": (lambda c: c.status(None), "name", "None"),
    "status bad name": (lambda c: c.status("Bad_Name"), "job name", "Bad_Name"),
    "status tail=-1": (lambda c: c.status("demo", tail=-1), "tail", "-1"),
    "metrics(b'x')": (lambda c: c.metrics(b"demo"), "name", "b'demo'"),
    "submit dry_run": (lambda c: c.submit("job.yaml", dry_run="yes"), "dry_run", "'yes'"),
    "submit timeout=nan": (lambda c: c.submit("job.yaml", timeout=NAN), "timeout", "nan"),
    "submit backend": (lambda c: c.submit("job.yaml", backend="slurm"), "backend", "'slurm'"),
    "list all_namespaces": (lambda c: c.list_jobs(all_namespaces="yes"), "all_namespaces",
                            "'yes'"),
    "train nodes=0": (lambda c: c.train("train.py", nodes=0), "nodes", "0"),
    "train a lambda": (lambda c: c.train(lambda: 1), "lambda", ""),
    "train args not JSON": (lambda c: c.train(_remote, args=[object()]), "args", "JSON"),
    "train args text": (lambda c: c.train(_remote, args="x"), "args", "str"),
    "train fn=5": (lambda c: c.train(5), "fn", "5"),
    "train timeout=nan": (lambda c: c.train(_remote, timeout=NAN), "timeout", "nan"),
    # Found only once the job was created (an observer is called first by the watch) or
    # by a traceback from the renderer, before issue 38.
    "submit observer=5": (lambda c: c.submit("job.yaml", observer=5), "observer", "start()"),
    "submit observer lacks stop": (lambda c: c.submit("job.yaml", observer=_HalfObserver()),
                                   "observer", "_HalfObserver", "stop()"),
    "submit code text": (lambda c: c.submit("job.yaml", code="abc"), "code", "'abc'",
                         "workdir="),
    "submit code dict": (lambda c: c.submit("job.yaml", code={}, wait=False), "code", "dict"),
    "wait observer": (lambda c: c.wait("demo", observer=print), "observer", "start()"),
    "wait_many bad selector": (lambda c: c.wait_many(selector="a b"), "selector", "'a b'"),
    "wait_many empty in": (lambda c: c.wait_many(selector="team in ()"), "selector",
                           "needs at least one value"),
    "watch_jobs bad selector": (lambda c: c.watch_jobs(on_update=print, selector="x=\t"),
                                "selector", "not allowed"),
    "train workdir=5": (lambda c: c.train(_remote, workdir=5), "workdir", "5"),
    "train script workdir": (lambda c: c.train("train.py", workdir=b"."), "workdir", "b'.'"),
    "plot into no folder": (lambda c: c.plot("demo", "no/such/folder/x.png"), "file",
                            "does not exist"),
}


class _HalfObserver:
    def start(self, state) -> None: ...
    def update(self, state) -> None: ...


def _remote(x: int = 1) -> int:
    return x


@pytest.mark.parametrize("case", BAD_CALLS, ids=str)
def test_bad_arguments_are_usage_errors_before_any_request(api, client, case, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    objects.job_yaml(tmp_path / "job.yaml")
    (tmp_path / "train.py").write_text("print('hi')\n")
    call, *words = BAD_CALLS[case]
    api.add(objects.job("demo"))
    mark = api.mark()
    with pytest.raises(UsageError) as raised:
        result = call(client)
        next(iter(result))  # a generator would fail here, not at the call
    message = str(raised.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    assert api.since(mark) == [], f"requests were sent: {api.since(mark)}"


@pytest.mark.parametrize("target, word", [
    ({"request_timeout": -1}, "request_timeout"), ({"request_timeout": "5"}, "request_timeout"),
    ({"request_timeout": NAN}, "request_timeout"), ({"request_timeout": True}, "request_timeout"),
    ({"namespace": "Bad_NS"}, "namespace"), ({"namespace": 5}, "namespace"),
    ({"kubeconfig": 5}, "kubeconfig"), ({"context": ""}, "context"),
])
def test_a_bad_target_is_refused_when_the_client_is_made(api, target, word):
    with pytest.raises(UsageError, match=word):
        kdist.Client(**target)
    with pytest.raises(UsageError, match=word):  # the module shortcuts check the same way
        kdist.status("demo", **target)
    assert api.requests == []


def test_module_shortcuts_check_before_sending(api, kubeconfig):
    mark = api.mark()
    with pytest.raises(UsageError, match="names: give a list"):
        kdist.api.wait_many("abc", kubeconfig=kubeconfig)
    with pytest.raises(UsageError, match="timeout"):
        kdist.wait("demo", timeout=NAN, kubeconfig=kubeconfig)
    assert api.since(mark) == []


@pytest.mark.parametrize("call, words", [
    (lambda: kdist.render(5), ["job", "TrainingJob", "or a job file", "int"]),
    (lambda: kdist.render(kdist.load_job("job.yaml"), code="abc"), ["code", "'abc'"]),
    (lambda: kdist.render(kdist.load_job("job.yaml"), "abc"), ["code", "'abc'"]),
    (lambda: kdist.load_job(5), ["path", "int"]),
    (lambda: kdist.parse_job(None), ["data", "NoneType"]),
    (lambda: kdist.to_yaml("abc"), ["objects", "str"]),
], ids=["render(5)", "render(code=)", "render(job, code)", "load_job(5)",
        "parse_job(None)", "to_yaml(str)"])
def test_the_job_file_functions_check_their_arguments(tmp_path, monkeypatch, call, words):
    monkeypatch.chdir(tmp_path)
    objects.job_yaml(tmp_path / "job.yaml")
    with pytest.raises(UsageError) as raised:
        call()
    for word in words:
        assert word in str(raised.value), raised.value


def test_a_good_observer_and_code_still_pass_the_checks(api, client, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    objects.job_yaml(tmp_path / "job.yaml")
    job = client.load("job.yaml")
    sub = client.submit(job, wait=False, observer=_Observer(), code=kdist.api.pack_code(job))
    assert sub.name == "demo" and api.store.get_stored("jobs", "demo")


class _Observer(_HalfObserver):
    def tick(self, state) -> None: ...
    def warning(self, text) -> None: ...
    def log(self, rank, line) -> None: ...
    def stop(self) -> None: ...


def test_client_keywords_are_keyword_only():
    with pytest.raises(TypeError):
        kdist.Client("kubeconfig")  # type: ignore[misc]


# ---- the target, once --------------------------------------------------------------------


def test_the_kubeconfig_is_read_once_and_the_connection_kept(api, client, kubeconfig):
    api.add(objects.job("demo"))
    assert [j.name for j in client.list_jobs()] == ["demo"]
    first = client._conn.cluster()
    kubeconfig.unlink()  # a client holds its target: no second read
    assert client.status("demo").name == "demo"
    assert client._conn.cluster() is first
    with pytest.raises(UsageError):  # a fresh one must read it, and cannot
        kdist.Client(kubeconfig=kubeconfig).status("demo")


# ---- logs --------------------------------------------------------------------------------


def test_logs_now_yield_rank_and_line_per_rank_in_turn(api, client):
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    api.set_log("demo-0-abcde", "zero a\nzero b\n")
    api.set_log("demo-1-abcde", "one a\none b\n")
    assert list(client.logs("demo")) == [(0, "zero a"), (0, "zero b"), (1, "one a"),
                                         (1, "one b")]
    assert list(client.logs("demo", tail=1, ranks=[1])) == [(1, "one b")]


def test_logs_of_a_missing_job_fail_at_the_call(api, client):
    with pytest.raises(JobNotFound):
        client.logs("nope", follow=True)


def test_logs_follow_a_rank_across_its_restart_to_the_jobs_end(api, client):
    job = api.add(objects.job("demo"))[0]
    api.add(ended_pod(job, 0, 1), ended_pod(job, 1, 0))
    api.set_log("demo-0-abcde", "first attempt\n")
    api.set_log("demo-1-abcde", "rank one\n")
    seen = []
    for rank, line in client.logs("demo", follow=True):
        seen.append((rank, line))
        if line == "first attempt":  # the Job controller replaces rank 0's pod
            api.set_log("demo-0-fghij", "second attempt\nlast words\n")
            api.add(ended_pod(job, 0, 0, name="demo-0-fghij", earlier=1))
        if line == "last words":
            complete(api, job)
    assert sorted(seen) == [(0, "first attempt"), (0, "last words"), (0, "second attempt"),
                            (1, "rank one")]
    assert seen.index((0, "first attempt")) < seen.index((0, "second attempt"))


# ---- metrics -----------------------------------------------------------------------------


def test_metrics_are_each_ranks_steps_across_a_restart(api, client):
    job = api.add(objects.job("demo"))[0]
    api.add(ended_pod(job, 0, 1), ended_pod(job, 0, 0, name="demo-0-fghij", earlier=1),
            ended_pod(job, 1, 0))
    api.set_log("demo-0-abcde", objects.step_log(0, steps=4))
    api.set_log("demo-0-fghij", 'noise\n{"event": "step", "step": 6, "loss": 0.1, '
                                '"samples_per_s": 512.0}\n')
    api.set_log("demo-1-abcde", objects.step_log(1))
    series = client.metrics("demo")
    assert sorted(series) == [0, 1]
    assert [(s.step, s.restart) for s in series[0]] == [(2, 0), (4, 0), (6, 1)]
    assert [s.loss for s in series[1]] == [0.5, 0.25, round(1 / 6, 4)]
    last = series[0][-1]
    assert (last.samples_per_s, last.rank) == (512.0, 0)
    assert last.time is not None and abs(last.time - 1735787045.0) < 1  # the log's stamp



def restarted_in_place(job, rank: int, restarts: int) -> dict:
    """Rank `rank`'s pod, running again after `restarts` restarts in place (same pod)."""
    pod = copy.deepcopy(objects.pod(job, rank))
    pod["status"]["containerStatuses"][0].update(restartCount=restarts, lastState={
        "terminated": {"exitCode": 137, "reason": "Error",
                       "finishedAt": "2025-01-02T03:04:30Z"}})
    return pod


def steps(*numbers: int) -> str:
    return "".join(f'{{"event": "step", "step": {n}, "loss": 0.5}}\n' for n in numbers)


def test_metrics_label_the_steps_of_a_pod_restarted_in_place_with_its_attempt(api, client):
    job = api.add(objects.job("demo"))[0]
    api.add(restarted_in_place(job, 0, restarts=1), restarted_in_place(job, 1, restarts=2))
    api.set_log("demo-0-abcde", steps(2, 4), previous=True)  # the kubelet keeps one
    api.set_log("demo-0-abcde", '{"event": "resume", "step": 4}\n' + steps(6))
    api.set_log("demo-1-abcde", steps(6, 8), previous=True)  # attempt 1's; 0's is gone
    api.set_log("demo-1-abcde", steps(8))
    series = client.metrics("demo")
    assert [(s.step, s.restart) for s in series[0]] == [(2, 0), (4, 0), (6, 1)]
    assert [(s.step, s.restart) for s in series[1]] == [(6, 1), (8, 1), (8, 2)]


def test_metrics_label_the_steps_after_a_restart_in_process_with_the_next_attempt(api, client):
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), restarted_in_place(job, 1, restarts=1))
    said = ("kdist.launch: restarting this node's workers (restart {} of 3, in process): "
            "worker rank 1 (node 1, local rank 0, pid 7) was killed by SIGKILL; exit 137\n")
    api.set_log("demo-0-abcde", steps(2, 4) + said.format(1) + steps(4, 6) + said.format(2)
                + steps(2))
    api.set_log("demo-1-abcde", steps(2), previous=True)
    # the pod restarted in place once (attempt 1), then its launcher restarted in process
    api.set_log("demo-1-abcde", steps(2, 4) + said.format(2) + steps(4))
    series = client.metrics("demo")
    assert [(s.step, s.restart) for s in series[0]] == [(2, 0), (4, 0), (4, 1), (6, 1),
                                                        (2, 2)]
    assert [(s.step, s.restart) for s in series[1]] == [(2, 0), (2, 1), (4, 1), (4, 2)]


def test_metrics_label_each_step_with_the_world_size_it_ran_at(api, client):
    """An elastic job shrinks and grows: each point says at which size (issue 55)."""
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0))
    line = '{{"event": "step", "step": {}, "loss": 0.5, "world_size": {}}}\n'
    api.set_log("demo-0-abcde", line.format(1, 3) + line.format(2, 2) + line.format(3, 3)
                + line.format(4, "true") + line.format(5, 0) + steps(6))
    (series,) = client.metrics("demo").values()
    assert [(s.step, s.world_size) for s in series] == [(1, 3), (2, 2), (3, 3), (4, None),
                                                        (5, None), (6, None)]
    assert series[0].to_dict()["world_size"] == 3


# ---- kdist status --plot -----------------------------------------------------------------


def test_status_plot_draws_the_steps_of_every_rank(api, kdist, tmp_path):
    pytest.importorskip("matplotlib")
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    for rank in (0, 1):
        api.set_log(f"demo-{rank}-abcde", objects.step_log(rank, steps=8))
    out = kdist("status", "demo", "--plot", str(tmp_path / "demo.svg"))
    assert out.code == 0, out.describe()
    assert "wrote" in out.stderr and "8 step(s) of 2 rank(s)" in out.stderr, out.describe()
    text = (tmp_path / "demo.svg").read_text()
    assert text.lstrip().startswith("<?xml") and "rank 1" in text


@pytest.mark.parametrize("where", ["no folder", "a link"])
def test_status_plot_refuses_a_missing_folder_or_a_link_before_any_request(api, kdist,
                                                                           tmp_path, where):
    pytest.importorskip("matplotlib")
    api.add(objects.job("demo"))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "demo.png"
    if where == "a link":
        target.symlink_to(victim)
    else:
        target = tmp_path / "no" / "such" / "demo.png"
    out = kdist("status", "demo", "--plot", str(target))
    error_line(out, 2, "--plot", "does not exist" if where == "no folder" else "link")
    assert out.requests == [], out.describe()
    assert victim.read_text() == "precious\n"


def test_status_plot_refuses_another_format_before_any_request(api, kdist, tmp_path):
    api.add(objects.job("demo"))
    out = kdist("status", "demo", "--plot", str(tmp_path / "demo.pdf"))
    assert out.code == 2 and out.requests == [], out.describe()
    assert "must end in .png or .svg" in out.stderr, out.describe()
