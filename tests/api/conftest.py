"""Fixtures of the fake-API tier: a server, a kubeconfig pointing at it, and kdist to run.

`kdist("delete", "x")` runs `kdist --kubeconfig KC delete x` in-process and returns an
`Outcome` (exit code, stdout, stderr, the requests that call sent). Every request
the server ever sees goes through the write guard (`routes.write_problem`); a
flagged one fails the test that caused it, whatever else that test asserts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.api import objects
from tests.api.fakeapi import FakeApi
from tests.api.kubeconfigs import write_kubeconfig
from tests.api.runner import Outcome, run_inprocess, run_process

Kdist = Callable[..., Outcome]


def _guard(api: FakeApi, outcome: Outcome | None = None) -> None:
    """Fail on write-guard violations not reported yet (each is reported once: by the
    kdist call that caused it, else at teardown)."""
    fresh = api.violations[api.reported:]
    if fresh:
        api.reported = len(api.violations)
        where = f"\n{outcome.describe()}" if outcome is not None else ""
        pytest.fail("kdist sent a write to a collection or an invalid object URL:\n  "
                    + "\n  ".join(fresh) + where, pytrace=False)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeApi]:
    """The fake API server; a test module's FAKEAPI_OPTIONS dict sets its options, its
    FAKEAPI_CLASS the server (a FakeApi subclass: tests/api/wireapi.py)."""
    cls = getattr(request.module, "FAKEAPI_CLASS", FakeApi)
    server = cls(**getattr(request.module, "FAKEAPI_OPTIONS", {})).start()
    yield server
    server.stop()
    _guard(server)


@pytest.fixture
def kubeconfig(api: FakeApi, tmp_path: Path) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", api.url)


@pytest.fixture
def kdist(api: FakeApi, kubeconfig: Path) -> Kdist:
    """Run a kdist command in-process against `api` (`kubeconfig=` to use another file)."""

    def run(*args: str, kubeconfig: Path = kubeconfig, env: dict[str, str] | None = None,
            input: str | None = None) -> Outcome:
        outcome = run_inprocess(api, kubeconfig, list(args), env=env, input=input)
        _guard(api, outcome)
        return outcome

    return run


@pytest.fixture
def kdist_proc(api: FakeApi, kubeconfig: Path) -> Kdist:
    """Run a kdist command as a child process, killed after `limit` seconds (or
    `limit_after_request` seconds after its first request), its address space capped at
    `max_memory_mb`."""

    def run(*args: str, limit: float, kubeconfig: Path = kubeconfig,
            env: dict[str, str] | None = None,
            limit_after_request: float | None = None,
            max_memory_mb: int | None = None) -> Outcome:
        outcome = run_process(api, kubeconfig, list(args), limit=limit, env=env,
                              limit_after_request=limit_after_request,
                              max_memory_mb=max_memory_mb)
        _guard(api, outcome)
        return outcome

    return run


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    """job.yaml of a 2-node indexed-job named "demo" (no namespace: the context's)."""
    return objects.job_yaml(tmp_path / "job.yaml")


@pytest.fixture
def baseline(kdist_proc: Kdist) -> Outcome:
    """A plain `kdist list` as a child process, for its start-up time and peak memory on
    this machine now (the machine is shared: absolute figures would be flaky)."""
    out = kdist_proc("list", limit=60, limit_after_request=30)
    assert out.code == 0 and out.after_first_request is not None, out.describe()
    return out
