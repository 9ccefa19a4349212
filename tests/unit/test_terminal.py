"""kdist.shared.terminal: what the cluster says is shown on a terminal, never obeyed.

Plus where it is applied without a cluster: errors, the many-jobs live table, and the
environment a local run's nodes inherit (kdist.local.local_env).
"""

from __future__ import annotations

import io

import pytest

from kdist.kube.errors import Action, HttpError, api_error
from kdist.kube.watch.state import JobState, RankState
from kdist.shared import env as E
from kdist.shared.errors import ClusterError, JobFailed, SpecError
from kdist.shared.terminal import escape, escape_lines, escape_log, log_for

CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b", "^["), ("\x07", "^G"), ("\x00", "^@"), ("\n", "^J"), ("\r", "^M"), ("\t", "^I"),
    ("\x1f", "^_"), ("\x7f", "^?"), ("\x9b", "M-^["), ("\x85", "M-^E"), ("\x80", "M-^@"),
    ("\u202e", "<U+202E>"), ("\u2028", "<U+2028>"), ("\u2066", "<U+2066>"),
    ("\ud800", "<U+D800>"),
    (CLIPBOARD, "^[]52;c;ZXZpbA==^G"), ("\x1b]0;title\x1b\\", "^[]0;title^[\\"),
])
def test_each_control_character_is_shown(raw, shown):
    assert escape(f"a{raw}b") == f"a{shown}b"


def test_printable_text_is_left_alone():
    text = "Pending (ImagePullBackOff): héllo 中文 🚀 [bold]x[/] ^[ \\x1b ~ \xa0\u200d"
    assert escape(text) == text


def test_every_code_point_of_control_categories_is_escaped_and_once_is_enough():
    every = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0), 0xD800, 0xDFFF]))
    shown = escape(every)
    assert shown.isprintable() and shown.isascii()
    assert escape(shown) == shown  # escaping twice changes nothing (boundary + printing)
    line = every.replace("\n", "")
    assert escape_lines(f"{line}\n{line}") == f"{escape(line)}\n{escape(line)}"


def test_anything_else_is_escaped_as_its_str():
    assert escape(["\x1b"]) == "['\\x1b']" and escape(3) == "3"


def test_a_log_line_keeps_its_colours_and_nothing_else():
    line = f"\x1b[1;31mloss\x1b[0m\t1.0 {CLIPBOARD} \x1b[2J\x1b[H \x9b1A \x1b]8;;http://e\x1b\\ok"
    assert escape_log(line + "\r") == (
        "\x1b[1;31mloss\x1b[0m\t1.0 ^[]52;c;ZXZpbA==^G ^[[2J^[[H M-^[1A ^[]8;;http://e^[\\ok")
    assert escape_log("[rank 9] fake\rreal") == "[rank 9] fake^Mreal"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_logs_are_escaped_for_a_terminal_only():
    line = f"\x1b[32mok\x1b[0m {CLIPBOARD}"
    assert log_for(_Tty(), line) == "\x1b[32mok\x1b[0m ^[]52;c;ZXZpbA==^G"
    assert log_for(io.StringIO(), line) == line  # a pipe or a file: as the pod wrote it
    closed = io.StringIO()
    closed.close()
    assert log_for(closed, line) == line


# ---- errors -------------------------------------------------------------------------------


def test_a_cluster_error_is_one_escaped_line_whatever_the_server_said():
    body = (b'{"kind": "Status", "code": 403, "message": "no\\u001b]0;t\\u0007\\nmore"}')
    e = api_error(HttpError(403, "Forbidden", body), Action("get", "jobs", "ns", "x"), "s")
    assert str(e) == "forbidden: get jobs in namespace ns: no^[]0;t^G^Jmore"
    assert str(ClusterError(f"x{CLIPBOARD}\ny")) == "x^[]52;c;ZXZpbA==^G^Jy"


def test_a_several_line_error_keeps_its_lines_but_not_their_control_characters():
    e = JobFailed(f"rank 0 raised ValueError: {CLIPBOARD}\n  File \x9b2J")
    assert str(e) == "rank 0 raised ValueError: ^[]52;c;ZXZpbA==^G\n  File M-^[2J"
    assert SpecError(["a\x1bb", "c"]).problems == ["a^[b", "c"]


def test_a_failure_line_is_one_line_whatever_the_names_in_it():
    state = JobState(name="j\x1b]0;t\x07", outcome="Failed", reason="R\nS")
    assert state.failure_line() == "job j^[]0;t^G failed [R^JS]"


# ---- the many-jobs live table (kdist list --watch, on a terminal) ----------------------------


def test_the_live_jobs_table_shows_hostile_names_as_text(monkeypatch):
    from kdist.cli.jobs_table import JobsTable

    monkeypatch.setenv("COLUMNS", "200")  # rich's width for a file: no cell cut short
    out = _Tty()
    state = JobState(name="oops[/bold]", namespace=f"[link=http://evil]ok[/link]{CLIPBOARD}")
    state.ranks[0] = RankState(0, pod="p", phase="Running")
    table = JobsTable(out=out)
    table.update([state])
    table.stop([state])
    text = out.getvalue()
    assert "\x1b]" not in text and "\x07" not in text, repr(text)
    assert "oops[/bold]" in text and "[link=http://evil]ok[/link]^[]52;c;ZXZpbA==^G" in text


# ---- a local run's environment -----------------------------------------------------------


def test_a_local_node_inherits_no_contract_name_from_the_shell(monkeypatch):
    from kdist.local import local_env

    shell = {"KDIST_PROGRESS_TIMEOUT": "1", "KDIST_CHECKPOINT_DIR": "/stale",
             "KDIST_CODE_SHA256": "beef", "RANK": "7", "MASTER_ADDR": "elsewhere",
             "TORCHELASTIC_RUN_ID": "x", "PET_NNODES": "9", "MY_OWN": "kept",
             "PATH": "/usr/bin", E.FAULT_KILL_AT: "1:5"}
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    env = local_env({E.JOB_NAME: "j", E.MASTER_ADDR: "127.0.0.1", "OMP_NUM_THREADS": "1"})
    assert not [k for k in env if E.contract_owned(k) and k not in (
        E.JOB_NAME, E.MASTER_ADDR, E.LOG_PREFIX, E.FAULT_KILL_AT)], env
    assert env["MY_OWN"] == "kept" and env["PATH"] == "/usr/bin"
    assert env[E.FAULT_KILL_AT] == "1:5"  # the fault drills' hook, on purpose
    assert env[E.MASTER_ADDR] == "127.0.0.1" and env[E.LOG_PREFIX] == "1"
