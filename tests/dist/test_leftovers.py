"""No process of a job outlives it, and a restart never fails on the last attempt's leftovers.

A script whose rank 0 is SIGKILLed while its DataLoader workers (forked children,
in its process group) are busy: before kdist killed the dead worker's group and
kept the master socket out of forked children, those workers held the master
port, the restart failed with "Address already in use" (exit 2), and they were
still running after kdist returned.
"""

from __future__ import annotations

import os
import textwrap

import pytest
from disttools import run_job

# At restart 0, rank 0's loader workers sleep far longer than the test (a slow
# dataset); rank 0 then dies by SIGKILL. At restart 1 everything goes through, and
# rank 0 forks a child that reports whether it holds a listening socket on the
# master port (it must not: only the store's server may).
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import torch, torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    MARK = sys.argv[1]
    restart = os.environ["TORCHELASTIC_RESTART_COUNT"]

    class Slow(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            if restart == "0":
                time.sleep(300)
            return torch.tensor([float(i)])

    def listening_on_master_port():
        port = int(os.environ["MASTER_PORT"])
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                f = row.split()
                if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                    return True
        return False

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = iter(DataLoader(Slow(), batch_size=4, num_workers=2,
                             multiprocessing_context="fork"))
    if restart == "0":
        time.sleep(2)  # the loader workers are busy in __getitem__ now
        if rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # rank 1: loses its peer
    batch = next(loader)
    if rank == 0:
        child = os.fork()
        if child == 0:
            print("child holds the master listener:", listening_on_master_port(), flush=True)
            os._exit(0)
        os.waitpid(child, 0)
    dist.barrier()
    print("done", rank, float(batch.sum()), flush=True)
    dist.destroy_process_group()
""")


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.timeout(180)
def test_a_restart_after_rank_0_is_killed_with_busy_dataloader_workers(tmp_path):
    marker = f"kdist-leftover-{os.getpid()}"
    script = tmp_path / "slow_loader.py"
    script.write_text(SCRIPT)
    try:
        run = run_job(["--", "python", str(script), marker], nodes=2, KDIST_MAX_RESTARTS="1")
        leftovers = _processes_with(marker)
        assert run.code == 0, run.text
        assert "Address already in use" not in run.text
        assert sum(line.endswith(" 6.0") and "] done " in line for line in run.lines) == 2, run.text
        assert "[rank 0] child holds the master listener: False" in run.lines, run.text
        assert leftovers == [], f"processes of the job outlived it: {leftovers}"
    finally:
        for pid in _processes_with(marker):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
