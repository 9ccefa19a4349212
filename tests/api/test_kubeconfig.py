"""Hostile kubeconfig files: refused quickly (exit 2, one line), bounded in time and memory.

The spec reader already bounds its input (size, nodes, depth, aliases); issue 14 asks
the same of the kubeconfig. Each case runs kdist as a child process (a FIFO blocks
an open() forever), measured against a plain run on this machine now (`baseline`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api import kubeconfigs
from tests.api.checks import error_line

SLACK = 3.0  # seconds beyond a plain run's
MEMORY_SLACK_MB = 40  # beyond a plain run's peak; the 50 MB file read whole would exceed it
KILL_AFTER = 15.0  # seconds beyond a plain run's: by then the case has failed anyway

pytestmark = pytest.mark.timeout(180)

VERBS = {"list": ["list"], "delete": ["delete", "demo"]}


def _refused(out, baseline, path) -> None:
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 2, str(path))
    assert out.requests == [], out.describe()
    assert out.seconds <= baseline.seconds + SLACK, \
        f"a plain run took {baseline.seconds:.1f}s:\n{out.describe()}"
    assert out.max_rss_mb <= baseline.max_rss_mb + MEMORY_SLACK_MB, \
        f"peak {out.max_rss_mb:.0f} MB, a plain run {baseline.max_rss_mb:.0f} MB"


@pytest.mark.parametrize("verb", VERBS)
def test_an_alias_bomb(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.alias_bomb(tmp_path / "bomb.yaml", api.url)
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


@pytest.mark.parametrize("verb", VERBS)
def test_a_huge_kubeconfig(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.huge(tmp_path / "huge.yaml", api.url, megabytes=50)
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


@pytest.mark.parametrize("verb", VERBS)
def test_a_fifo_as_kubeconfig(api, kdist_proc, baseline, tmp_path, verb):
    path = kubeconfigs.fifo(tmp_path / "fifo")
    out = kdist_proc(*VERBS[verb], kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    _refused(out, baseline, path)


def test_a_directory_as_kubeconfig(api, kdist, tmp_path):
    out = kdist("list", kubeconfig=tmp_path)
    error_line(out, 2, str(tmp_path))
    assert out.requests == [], out.describe()


def test_a_kubeconfig_that_is_not_yaml(api, kdist, tmp_path):
    path = tmp_path / "binary"
    path.write_bytes(b"\x00\x01\x02kind: Config\xff\xfe")
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(path))
    assert out.requests == [], out.describe()


# ---- the files and the plugin a kubeconfig names (issue 22) --------------------------------

CREDENTIAL = ('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
              '"status": {"token": "fake-token"}}')
EXEC_API = "client.authentication.k8s.io/v1"


@pytest.mark.parametrize("field", ["tokenFile", "client-key"])
def test_a_fifo_named_by_the_kubeconfig_does_not_hang(api, kdist_proc, baseline, tmp_path,
                                                      field):
    pipe = kubeconfigs.fifo(tmp_path / "pipe")
    user = {"tokenFile": str(pipe)} if field == "tokenFile" else {
        "client-certificate": str(pipe), "client-key": str(pipe)}
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, user)
    out = kdist_proc("list", kubeconfig=path, limit=baseline.seconds + KILL_AFTER)
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 2, str(pipe), "not a regular file")
    assert out.requests == [], out.describe()


def test_a_token_file_is_read_from_the_kubeconfigs_directory(api, kdist, tmp_path):
    """As kubectl does: a relative tokenFile is next to the kubeconfig, not in the cwd."""
    (tmp_path / "token").write_text("fake-token\n")
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {"tokenFile": "token"})
    out = kdist("list", kubeconfig=path)
    assert out.code == 0, out.describe()
    assert out.requests and all(r.headers.get("authorization") == "Bearer fake-token"
                                for r in out.requests), out.describe()


@pytest.mark.parametrize("what", ["directory", "huge", "binary"])
def test_a_token_file_that_is_not_a_token_is_refused(api, kdist, tmp_path, what):
    token = tmp_path / "token"
    if what == "directory":
        token.mkdir()
    else:
        token.write_bytes(b"\xff\xfe" if what == "binary" else b"x" * (2 << 20))
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {"tokenFile": str(token)})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, str(token))
    assert out.requests == [], out.describe()


@pytest.mark.parametrize("script,said", [
    ("echo 'token expired: run corp-login' >&2; exit 1", "token expired: run corp-login"),
    ("echo 'not json'", "decode"),
    ("echo '{\"apiVersion\": \"client.authentication.k8s.io/v1\", \"kind\": "
     "\"ExecCredential\", \"status\": {}}'", "missing token"),
])
def test_a_failing_credential_plugin_fails_the_command(api, kdist, tmp_path, script, said):
    """Not requests without credentials (a 401 that hides why): exit 3, the plugin's words."""
    cmd = kubeconfigs.plugin(tmp_path / "corp-login", script)
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url,
                                 {"exec": {"apiVersion": EXEC_API, "command": str(cmd)}})
    out = kdist("list", kubeconfig=path)
    error_line(out, 3, "credential plugin", str(cmd), said)
    assert out.requests == [], out.describe()


def _unrunnable(tmp_path, what):
    """An exec `command` that cannot be started, and what the error line must say."""
    if what == "the root folder":
        return "/", "directory"
    if what == "a missing file":
        return str(tmp_path / "no-such-plugin"), "does not exist"
    if what == "a file without x":
        script = kubeconfigs.plugin(tmp_path / "corp-login", f"echo '{CREDENTIAL}'")
        script.chmod(0o644)
        return str(script), "not executable"
    if what == "a folder":
        return str(tmp_path), "directory"
    if what == "no program":  # executable, but the kernel cannot run it (ENOEXEC)
        script = tmp_path / "corp-login"
        script.write_bytes(b"\x00\x01 not a program\n")
        script.chmod(0o755)
        return str(script), "not a program this system can run"
    if what == "a missing interpreter":
        script = tmp_path / "corp-login"
        script.write_text("#!/kdist/no/such/interpreter\n")
        script.chmod(0o755)
        return str(script), "the interpreter its #! line names does not exist"
    return "kdist-no-such-plugin", "not found on PATH"


@pytest.mark.parametrize("what", ["the root folder", "a missing file", "a file without x",
                                  "a folder", "a name not on PATH", "no program",
                                  "a missing interpreter"])
def test_a_credential_plugin_that_cannot_be_run_is_a_kubeconfig_error(api, kdist, tmp_path,
                                                                      what):
    """Exit 2 naming users[NAME].user.exec.command, not exit 3 as a plugin that ran and
    failed (that one stays 3: test_a_failing_credential_plugin_fails_the_command)."""
    command, said = _unrunnable(tmp_path, what)
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {
        "exec": {"apiVersion": EXEC_API, "command": command}})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, "users[fake].user.exec.command", "credential plugin", command, said)
    assert out.requests == [], out.describe()


@pytest.mark.parametrize("exec_, field", [
    ({"apiVersion": EXEC_API}, "exec.command"),
    ({"command": "/bin/true"}, "exec.apiVersion"),
    ({"apiVersion": EXEC_API, "command": "/bin/true", "args": ["--x", 5]}, "exec.args"),
    ({"apiVersion": EXEC_API, "command": "/bin/true", "env": [{"name": "A"}]}, "exec.env"),
])
def test_a_credential_plugin_entry_the_loader_cannot_run_is_a_kubeconfig_error(
        api, kdist, tmp_path, exec_, field):
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {"exec": exec_})
    out = kdist("list", kubeconfig=path)
    error_line(out, 2, f"users[fake].user.{field}")
    assert out.requests == [], out.describe()


def test_a_relative_plugin_path_is_found_from_the_kubeconfigs_folder(api, kdist, tmp_path):
    """As kubectl: a command with a "/" is relative to the kubeconfig, not to the cwd."""
    (tmp_path / "bin").mkdir()
    kubeconfigs.plugin(tmp_path / "bin" / "corp-login", f"echo '{CREDENTIAL}'")
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {
        "exec": {"apiVersion": EXEC_API, "command": "bin/corp-login"}})
    assert not (Path.cwd() / "bin" / "corp-login").exists()
    out = kdist("list", kubeconfig=path)
    assert out.code == 0, out.describe()
    assert out.requests[0].headers.get("authorization") == "Bearer fake-token", out.describe()


def test_a_plugin_on_the_plugins_own_path_is_found(api, kdist, tmp_path):
    """The loader runs the plugin with its env entries: their PATH is where it is looked up."""
    (tmp_path / "bin").mkdir()
    kubeconfigs.plugin(tmp_path / "bin" / "corp-login", f"echo '{CREDENTIAL}'")
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url, {
        "exec": {"apiVersion": EXEC_API, "command": "corp-login",
                 "env": [{"name": "PATH", "value": f"{tmp_path / 'bin'}:/usr/bin:/bin"}]}})
    out = kdist("list", kubeconfig=path)
    assert out.code == 0, out.describe()


def test_a_working_credential_plugin_is_used(api, kdist, tmp_path):
    cmd = kubeconfigs.plugin(tmp_path / "corp-login", f"echo '{CREDENTIAL}'")
    path = kubeconfigs.with_user(tmp_path / "kc.yaml", api.url,
                                 {"exec": {"apiVersion": EXEC_API, "command": str(cmd)}})
    out = kdist("list", kubeconfig=path)
    assert out.code == 0, out.describe()
    assert out.requests[0].headers.get("authorization") == "Bearer fake-token", out.describe()
