"""Hostile input refused with exit 2, the field path, and no traceback (issue 14).

Each case is written as a user would write it: YAML text. What matters is
that the value never reaches the API server or a container changed.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.shared.errors import SpecError
from kdist.spec import parse_job

HEAD = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata:
  name: {name}
spec:
  image: registry.example/kdist-train:0.1.0
  nodes: 2
  workload:
    module: kdist.workloads.ddp
"""


def job(body: str = "", name: str = "good") -> str:
    return HEAD.format(name=name) + body


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_job(text, "job.yaml")
    assert all(p.startswith("job.yaml: ") for p in e.value.problems), e.value.problems
    return e.value.problems


def refused(text: str, *fragments: str) -> None:
    found = " | ".join(problems(text))
    for fragment in fragments:
        assert fragment in found, found


def test_base_is_valid():
    parse_job(job(), "job.yaml")


# ---- every pattern matches the whole value -------------------------------------------------

@pytest.mark.parametrize("text,field", [
    (HEAD.replace("name: {name}", "name: |\n    good\n").format(name=""), "metadata.name"),
    (job().replace("image: registry.example/kdist-train:0.1.0",
                   'image: "registry.example/x:1\\n"'), "spec.image"),
    (job().replace("metadata:\n", "metadata:\n  namespace: \"team\\n\"\n"), "metadata.namespace"),
    (job().replace("metadata:\n", "metadata:\n  labels: {team: \"a\\n\"}\n"), "metadata.labels"),
    (job('  env: {"A\\n": x}\n').replace("  env:", "  env:"), "spec.env"),
    (job().replace("module: kdist.workloads.ddp", 'module: "kdist.workloads.ddp\\n"'),
     "spec.workload.module"),
    (job('  envFrom: [{secretRef: {name: "s\\n"}}]\n'), "spec.envFrom[0].secretRef.name"),
    (job('  envFrom: [{secretRef: {name: s}, prefix: "P_\\n"}]\n'), "spec.envFrom[0]"),
    (job('  checkpoint: {path: "/ckpt\\n", volume: {emptyDir: {}}}\n'), "spec.checkpoint.path"),
    (job('  scheduling: {queue: "q\\n"}\n'), "spec.scheduling.queue"),
    (job('  scheduling: {priorityClassName: "p\\n"}\n'), "spec.scheduling.priorityClassName"),
    (job('  scheduling: {nodeSelector: {"k": "v\\n"}}\n'), "spec.scheduling.nodeSelector"),
])
def test_a_trailing_newline_is_refused_everywhere(text, field):
    refused(text, field)


# ---- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1" * 5000, "0x" + "f" * 5000, "1" + "0" * 70])
def test_huge_integers_are_refused_not_crashed(value):
    refused(job().replace("nodes: 2", f"nodes: {value}"), "too large")


@pytest.mark.parametrize("field,value,fragment", [
    ("ttlSecondsAfterFinished", 2**31, "spec.ttlSecondsAfterFinished"),
    ("activeDeadlineSeconds", 2**63, "spec.activeDeadlineSeconds"),
])
def test_integers_beyond_the_kubernetes_field_type(field, value, fragment):
    refused(job(f"  {field}: {value}\n"), fragment)


def test_toleration_seconds_beyond_int64():
    refused(job("  scheduling: {tolerations: [{key: k, operator: Exists, effect: NoExecute, "
                f"tolerationSeconds: {2**63}}}]}}\n"), "tolerationSeconds")


@pytest.mark.parametrize("cpu", ['"1' + "0" * 5000 + '"', '"1e999"', '"9' * 1 + "9" * 40 + '"'])
def test_absurd_quantities_are_refused_before_render(cpu):
    refused(job(f"  resources: {{cpu: {cpu}}}\n"), "spec.resources.cpu")


# ---- strings YAML would silently change ---------------------------------------------------

@pytest.mark.parametrize("plain", ["1.10", "010", "1:30", "0x1F", ".nan", "+1", "1_000", ".inf",
                                   "1.0e+3", "0b101"])
def test_numbers_yaml_rewrites_must_be_quoted(plain):
    refused(job(f"  env: {{VERSION: {plain}}}\n"), "spec.env.VERSION", "quote it")
    text = job().replace("module: kdist.workloads.ddp",
                         f"module: kdist.workloads.ddp\n    args: [--v, {plain}]")
    refused(text, "spec.workload.args[1]", "quote it")


@pytest.mark.parametrize("plain,text", [("2", "2"), ("200", "200"), ("0.5", "0.5"), ("-3", "-3")])
def test_numbers_that_keep_their_text_are_fine(plain, text):
    j = parse_job(job(f"  env: {{N: {plain}}}\n  resources: {{cpu: {plain.lstrip('-')}}}\n"),
                  "job.yaml")
    assert j.spec.env["N"] == text


def test_quoted_numbers_stay_text():
    j = parse_job(job('  env: {VERSION: "1.10"}\n'), "job.yaml")
    assert j.spec.env["VERSION"] == "1.10"
    # YAML 1.1 (PyYAML) reads these as text already: they reach the container as written.
    j = parse_job(job("  env: {A: 1e3, B: 0o17}\n"), "job.yaml")
    assert (j.spec.env["A"], j.spec.env["B"]) == ("1e3", "0o17")


def test_binary_and_other_tags_are_refused():
    refused(job("  env: {B: !!binary aGVsbG8=}\n"), "tag:yaml.org,2002:binary")
    refused(job("  env: {D: !!timestamp 2001-12-14}\n"), "timestamp")
    refused(job("  env: {X: !custom x}\n"), "!custom")


# ---- characters ----------------------------------------------------------------------------

def test_nul_in_env_or_args_is_refused():
    refused(job('  env: {A: "x\\0y"}\n'), "spec.env.A", "NUL")
    text = job().replace("module: kdist.workloads.ddp",
                         'module: kdist.workloads.ddp\n    args: ["a\\0b"]')
    refused(text, "spec.workload.args[0]", "NUL")


@pytest.mark.parametrize("char", ["\u0085", "\u2028", "\u2029"])
def test_raw_yaml_line_breaks_are_refused(char):
    # An editor shows this as one line; PyYAML sees a second key (an extra env var).
    text = job(f"  env: {{A: x,{char}  RANK: '0'}}\n")
    refused(text, "line 10", f"U+{ord(char):04X}")


def test_escaped_line_breaks_in_double_quotes_are_values():
    j = parse_job(job('  env: {A: "x\\u2028y"}\n'), "job.yaml")
    assert j.spec.env["A"] == "x\u2028y"


# ---- rules the API server enforces, caught early ----------------------------------------------

@pytest.mark.parametrize("body,fragment", [
    ("  scheduling: {tolerations: [{key: k, operator: Equal, value: 'a b'}]}\n",
     "spec.scheduling.tolerations[0]"),
    ("  scheduling: {nodeSelector: {/x: y}}\n", "spec.scheduling.nodeSelector"),
    ("  scheduling: {tolerations: [{key: /x, operator: Exists}]}\n", "tolerations[0]"),
    ("  envFrom: [{secretRef: {name: s}, prefix: KDIST_X}]\n", "spec.envFrom[0]"),
    ("  envFrom: [{configMapRef: {name: s}, prefix: TORCHELASTIC_}]\n", "spec.envFrom[0]"),
    ("  checkpoint: {path: //dev/shm, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  checkpoint: {path: /dev//shm/x, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  checkpoint: {path: /usr, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  checkpoint: {path: /usr/local/ckpt, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  checkpoint: {path: /etc/, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  checkpoint: {path: /, volume: {emptyDir: {}}}\n", "spec.checkpoint.path"),
    ("  env: {ROLE_RANK: '1'}\n", "spec.env"),
])
def test_kubernetes_rules_caught_early(body, fragment):
    refused(job(body), fragment)


@pytest.mark.parametrize("queue", ["Team-A", "q_1", "q.", ".q", "a..b", "-q", "q" * 64])
def test_queue_names_no_localqueue_can_have_are_refused(queue):
    """Each is a valid label value, but Kueue refuses a queue-name label that is not a
    DNS-1123 subdomain: the job would be created and never admitted."""
    refused(job(f"  scheduling: {{queue: '{queue}'}}\n"), "spec.scheduling.queue", "DNS-1123")


@pytest.mark.parametrize("queue", ["team-a", "team.a", "q1", "0", "q" * 63])
def test_localqueue_names_are_accepted(queue):
    assert parse_job(job(f"  scheduling: {{queue: '{queue}'}}\n"),
                     "job.yaml").spec.scheduling.queue == queue


@pytest.mark.parametrize("key", ["/x", "job-name", "controller-uid", "batch.kubernetes.io/x",
                                 "app.kubernetes.io/name", "kdist.dev/anything",
                                 "kueue.x-k8s.io/queue-name"])
def test_labels_kdist_or_the_job_controller_own_are_refused(key):
    refused(job().replace("metadata:\n", f"metadata:\n  labels: {{'{key}': v}}\n"),
            "metadata.labels")


@pytest.mark.parametrize("key", ["app.kubernetes.io/part-of", "app.kubernetes.io/version",
                                 "team", "example.com/owner"])
def test_recommended_labels_are_the_users(key):
    j = parse_job(job().replace("metadata:\n", f"metadata:\n  labels: {{'{key}': v1}}\n"),
                  "job.yaml")
    assert j.metadata.labels[key] == "v1"


# ---- the CLI: names, flags, files -------------------------------------------------------------

def run(*args: str):
    return CliRunner().invoke(main, list(args))


def check_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "0", "-5", "abc"])
def test_bad_timeouts_are_usage_errors(value, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(job())
    check_usage_error(run("submit", str(spec), "--timeout", value), "--timeout")
    check_usage_error(run("delete", "x", "--timeout", value), "--timeout")
    check_usage_error(run("--request-timeout", value, "list"), "--request-timeout")


@pytest.mark.parametrize("ns", ["Bad_NS", "a/b", "a\n", "-x", "x" * 64])
def test_bad_namespace_flag_is_refused_before_rendering(ns, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(job())
    check_usage_error(run("-n", ns, "render", str(spec)), "namespace")


@pytest.mark.timeout(20)
def test_a_fifo_as_spec_does_not_hang(tmp_path):
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    result = run("validate", str(fifo))
    check_usage_error(result, "not a regular file")


def test_init_refuses_missing_dir_dangling_link_and_read_only(tmp_path):
    check_usage_error(run("init", str(tmp_path / "nope" / "job.yaml")), "does not exist")
    target = tmp_path / "elsewhere.yaml"
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    check_usage_error(run("init", str(link)), "symbolic link")
    check_usage_error(run("init", "--force", str(link)), "symbolic link")
    assert not target.exists()  # nothing written through the link
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.geteuid() != 0:  # root writes anyway; the message is only reachable as a user
            check_usage_error(run("init", str(ro / "job.yaml")), "cannot write")
    finally:
        ro.chmod(0o755)
    ok = run("init", str(tmp_path / "job.yaml"))
    assert ok.exit_code == 0 and (tmp_path / "job.yaml").read_text().startswith("#")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.yaml"[:0] or "job.yaml",
                                                         "link.yaml", "ro"]


def test_run_local_without_torch_says_what_to_install(tmp_path, monkeypatch):
    spec = tmp_path / "job.yaml"
    spec.write_text(job())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed
    result = run("run", "--local", str(spec))
    check_usage_error(result, "pip install 'kdist[train]'")


def test_run_local_with_kdist_state_a_file(tmp_path, monkeypatch):
    spec = tmp_path / "job.yaml"
    spec.write_text(job())
    (tmp_path / ".kdist").write_text("not a directory")
    monkeypatch.chdir(tmp_path)
    check_usage_error(run("run", "--local", str(spec)), ".kdist", "is a file")


def test_a_fifo_kubeconfig_does_not_hang(tmp_path):
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    done = threading.Event()
    result = {}

    def call() -> None:
        result["r"] = run("--kubeconfig", str(fifo), "list")
        done.set()

    threading.Thread(target=call, daemon=True).start()
    assert done.wait(20), "kdist list blocked on a FIFO kubeconfig"
    check_usage_error(result["r"], "not a regular file")
