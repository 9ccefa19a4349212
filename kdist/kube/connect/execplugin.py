"""A kubeconfig's exec credential plugin: a command that can be run, or exit 2 naming it.

The official loader runs the plugin, and when it cannot even start it (no such
file, a directory such as ``command: /``, no execute permission, an argument
that is not text) it logs why and goes on without credentials, which reads as a
plugin that ran and failed (exit 3). A command that cannot be run is an error
in the kubeconfig, as kubectl's "exec: executable ... not found" is: checked
here, before anything runs or is sent, naming ``users[NAME].user.exec.FIELD``.
What no look at the file can tell (a program this system cannot run, a ``#!`` line
naming an interpreter that is not there) is told by the loader's own failure to
start it (`check_started`), and is exit 2 too. A plugin that runs and fails stays
exit 3, in its own words (kdist.kube.connect.config).

The command is found as kubectl finds it: one with a "/" in it relative to the
folder of the kubeconfig that names it (`anchor`), a bare name on PATH (the
plugin's own env may set PATH: the loader runs it with that env).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Any

from kdist.shared.errors import UsageError

# What the loader tries before the plugin, in its order; any of them and it never runs.
_BEFORE_EXEC = ("auth-provider", "token", "tokenFile")


def anchor(doc: dict[str, Any], base: str) -> None:
    """Make each user's relative exec command with a "/" absolute, from `base` (the
    kubeconfig's folder), as kubectl's loader does; a bare name stays a PATH lookup."""
    for entry in doc.get("users") or []:
        user = entry.get("user") if isinstance(entry, dict) else None
        plugin = user.get("exec") if isinstance(user, dict) else None
        if not isinstance(plugin, dict):
            continue
        command = plugin.get("command")
        if isinstance(command, str) and "/" in command and not os.path.isabs(command):
            plugin["command"] = os.path.join(base, command)


def check(user: dict[str, Any], named: Callable[[str], str]) -> None:
    """UsageError when the chosen user's exec plugin would be run but cannot be.

    `named("exec.command")` names a field in messages (`KUBECONFIG: users[NAME].user.`...).
    """
    plugin = user.get("exec")
    if not isinstance(plugin, dict) or any(user.get(k) for k in _BEFORE_EXEC):
        return
    for key in ("apiVersion", "command"):
        value = plugin.get(key)
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"{named('exec.' + key)}: missing (a credential plugin needs "
                             "apiVersion and command)")
    args = plugin.get("args")
    if args is not None and (not isinstance(args, list)
                             or not all(isinstance(a, str) for a in args)):
        raise UsageError(f"{named('exec.args')}: must be a list of strings")
    env = _env(plugin.get("env"), named)
    command = plugin["command"]
    if any("\0" in text for text in (command, *(args or []))):
        raise UsageError(f"{named('exec.command')}: holds a NUL character")
    problem = _unrunnable(command, os.get_exec_path({**os.environ, **env}))
    if problem:
        raise UsageError(f"{named('exec.command')}: the credential plugin cannot be run: "
                         f"{problem}")


def from_start(error: OSError) -> bool:
    """Whether `error` was raised starting a process (subprocess's exec), not later."""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") == "subprocess":
            return True
        tb = tb.tb_next
    return False


def check_started(user: dict[str, Any], unstarted: OSError | None,
                  named: Callable[[str], str]) -> None:
    """UsageError naming the exec plugin when the loader could not start it (`unstarted`)."""
    if unstarted is None or not isinstance(user.get("exec"), dict):
        return
    command = user["exec"].get("command")
    if unstarted.errno == errno.ENOEXEC:
        why = "not a program this system can run (no #! line, or built for another system)"
    elif unstarted.errno == errno.ENOENT:  # `check` found the file: its interpreter is not
        why = "the interpreter its #! line names does not exist"
    else:
        why = unstarted.strerror or str(unstarted)
    raise UsageError(f"{named('exec.command')}: the credential plugin cannot be run: "
                     f"{command!r}: {why}")


def _env(entries: Any, named: Callable[[str], str]) -> dict[str, str]:
    """The plugin's env entries as the loader adds them (a later name wins)."""
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"]
            and isinstance(e.get("value"), str)
            and "\0" not in e["name"] + e["value"] and "=" not in e["name"]
            for e in entries):
        raise UsageError(f"{named('exec.env')}: must be a list of {{name, value}} strings")
    return {e["name"]: e["value"] for e in entries}


def _unrunnable(command: str, search: list[str]) -> str | None:
    """Why `command` cannot be started (as subprocess would look for it); None if it can."""
    if "/" in command:
        return _file_problem(command)
    found = [os.path.join(folder or ".", command) for folder in search]
    if any(_file_problem(path) is None for path in found):
        return None
    existing = [path for path in found if os.path.lexists(path)]
    if existing:
        return _file_problem(existing[0])
    return f"{command!r} was not found on PATH"


def _file_problem(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{path!r} does not exist"
    except OSError as e:
        return f"{path!r}: {e.strerror or e}"
    if stat.S_ISDIR(mode):
        return f"{path!r} is a directory, not a program"
    if not stat.S_ISREG(mode):
        return f"{path!r} is not a regular file"
    if not os.access(path, os.X_OK):
        return f"{path!r} is not executable (chmod +x it, or name the right file)"
    return None
