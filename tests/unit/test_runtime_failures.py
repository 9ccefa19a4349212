"""kdist.runtime.failures: a lost peer told from a code error in any script's output, and blame."""

from __future__ import annotations

import signal

import pytest

from kdist.runtime.failures import (
    cause,
    is_peer_lost,
    last_exceptions,
    output_says_peer_lost,
    pick_failure,
)
from kdist.shared import exitcodes

GLOO_RESET = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:"
              "561] Connection closed by peer [127.0.0.1]:17287. This is typically caused by a "
              "remote worker crashing.")


def traceback_of(*exception_lines: str, prefix: str = "") -> str:
    """Python's output for an uncaught chain of exceptions, causes first."""
    blocks = []
    for line in exception_lines:
        blocks.append("\n".join(prefix + text for text in [
            "Traceback (most recent call last):",
            '  File "/app/train.py", line 33, in <module>',
            "    dist.all_reduce(total)",
            "    ^^^^^^^^^^^^^^^^^^^^^^",
            line,
        ]))
    chained = "\n\n" + prefix + ("The above exception was the direct cause of the following "
                                 "exception:") + "\n\n"
    return "epoch 3 done\n" + chained.join(blocks) + "\n"


@pytest.mark.parametrize("prefix", ["", "[rank0]: "])  # torch's excepthook prefixes ranks
def test_a_gloo_error_in_any_scripts_output_is_a_lost_peer(prefix):
    text = traceback_of(GLOO_RESET, prefix=prefix)
    assert last_exceptions(text) == [("RuntimeError", GLOO_RESET.split(": ", 1)[1])]
    assert output_says_peer_lost(text)


@pytest.mark.parametrize("line", [
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 15000ms for recv operation to complete",  # collectiveTimeoutSeconds on gloo
    "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",  # the store
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
    "process exited or there was a network error",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
])
def test_lost_peer_signatures(line):
    assert output_says_peer_lost(traceback_of(line))


@pytest.mark.parametrize("text", [
    traceback_of("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)"),
    traceback_of("ValueError: Connection reset by peer"),  # the script's own words
    traceback_of("KeyError: 'loss'"),
    "Connection reset by peer\n",  # printed, not raised
    "",
])
def test_code_errors_stay_code_errors(text):
    assert not output_says_peer_lost(text)


def test_a_lost_peer_that_caused_the_scripts_own_error_still_counts():
    text = traceback_of(GLOO_RESET, "ValueError: while stepping the schedule")
    assert [kind for kind, _ in last_exceptions(text)] == ["RuntimeError", "ValueError"]
    assert output_says_peer_lost(text)


def test_only_the_last_chain_counts():
    """A lost peer logged and survived earlier does not excuse a later code error."""
    text = traceback_of(GLOO_RESET) + "retrying\n" + traceback_of("KeyError: 'loss'")
    assert last_exceptions(text) == [("KeyError", "'loss'")]
    assert not output_says_peer_lost(text)


def test_live_exceptions_are_read_by_class():
    import torch.distributed as dist

    assert is_peer_lost(RuntimeError(GLOO_RESET.split(": ", 1)[1]))
    assert is_peer_lost(dist.DistNetworkError("store connection lost"))
    assert not is_peer_lost(ValueError("Connection reset by peer"))


@pytest.mark.parametrize(("failures", "named"), [
    # 1 node x 2: rank 1 SIGKILLed, the agent SIGTERMed rank 0 within the same second
    ({0: (-signal.SIGTERM, 5.0), 1: (-signal.SIGKILL, 5.0)}, 1),
    ({0: (-signal.SIGKILL, 5.0), 1: (-signal.SIGTERM, 5.0)}, 0),
    # ... even when torch's timestamp of the SIGTERM is the earlier one
    ({0: (-signal.SIGTERM, 4.0), 1: (-signal.SIGKILL, 5.0)}, 1),
    # a code error still names the job's failure
    ({0: (1, 6.0), 1: (-signal.SIGKILL, 5.0)}, 0),
    # a lost peer (reclassified from its output) is named last
    ({0: (exitcodes.PEER_LOST, 4.0), 1: (-signal.SIGKILL, 5.0)}, 1),
])
def test_blame_goes_to_the_killed_rank_not_the_one_the_agent_stopped(failures, named):
    assert pick_failure(failures) == named


def test_cause_comes_from_the_error_file_else_from_the_output():
    assert cause({"message": "RuntimeError: disk full"}) == ": RuntimeError: disk full"
    assert cause("To enable traceback see: https://pytorch.org/docs/...") == ""
    assert cause(None, traceback_of("KeyError: 'loss'")) == \
        ": KeyError: 'loss' (/app/train.py:33)"  # where, in the user's code
    assert cause(None, "just a line\n") == ""


@pytest.mark.parametrize(("line", "lost"), [
    # The job's own master (port 29500) gone: another rank's fault, worth a restart.
    ("torch.distributed.DistNetworkError: The client socket has timed out after 5000ms "
     "while trying to connect to (demo-0.demo, 29500).", True),
    # A store the script set up itself, on its own port (mp.spawn): never formed.
    ("torch.distributed.DistNetworkError: The client socket has timed out after 5000ms "
     "while trying to connect to (127.0.0.1, 12355).", False),
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to any "
     "network address of (localhost, 12355).", False),
    ("torch.distributed.DistNetworkError: TCP client failed to connect/validate to host "
     "[::1]:12355 - timed out", False),
])
def test_a_store_on_a_port_of_the_scripts_own_never_formed(line, lost):
    assert output_says_peer_lost(traceback_of(line), master_port=29500) is lost
    assert output_says_peer_lost(traceback_of(line))  # without the port: torch's class decides
