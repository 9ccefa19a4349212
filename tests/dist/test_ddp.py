"""The DDP workload under the real launcher: equivalence, failure, exact resume; and its
options: --dtype (autocast), --grad-compression (a comm hook), --bucket-cap-mb."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from disttools import TINY, Run, assert_ok, final_state, run_job

from kdist.workloads import ddp as ddp_workload
from kdist.workloads.common import Dist

STEPS = ["--max-steps", "20", "--checkpoint-every", "4", "--log-every", "2",
         "--keep-checkpoints", "0", "--seed", "5", "--batch-size", "16"]


def ddp(ckpt: Path, *extra: str) -> list[str]:
    return ["--module", "kdist.workloads.ddp", "--", *TINY, *STEPS,
            "--checkpoint-dir", str(ckpt), *extra]


def assert_same_params(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    run = run_job(ddp(ckpt), nodes=2)
    assert_ok(run)
    return final_state(ckpt)


@pytest.mark.timeout(90)
@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # pytest owns stderr
def test_two_ranks_equal_one_process_on_the_full_batch(uninterrupted, tmp_path, capsys):
    # `uninterrupted` is 2 ranks x batch 16; this is 1 process x batch 32, run
    # right here (no launcher: a group of one), which spares a torch start-up.
    assert ddp_workload.main(ddp(tmp_path, "--batch-size", "32")[3:]) == 0
    done = [json.loads(line) for line in capsys.readouterr().out.splitlines()][-1]
    assert (done["event"], done["step"], done["world_size"]) == ("done", 20, 1)
    one = final_state(tmp_path)
    for name in one["model"]:
        torch.testing.assert_close(
            uninterrupted["model"][name], one["model"][name], atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Run, Path]:
    """A 2-node job whose rank 1 is SIGKILLed after step 10 (checkpoints at 4 and 8)."""
    ckpt = tmp_path_factory.mktemp("killed")
    return run_job(ddp(ckpt), nodes=2, KDIST_FAULT_KILL_AT="1:10"), ckpt


@pytest.mark.timeout(120)
def test_killed_rank_fails_the_job_quickly_with_a_clear_message(killed):
    run, ckpt = killed
    # The kill names the job's failure; node 0 exits "peer lost" (203), not a code error.
    assert run.code == 128 + 9, run.text
    assert run.seconds < 60
    assert "kdist.launch: worker rank 1 (node 1, local rank 0" in run.text
    assert "was killed by SIGKILL" in run.text
    assert "kdist: rank 0 lost a peer" in run.text
    assert "kdist.launch: worker rank 0 (node 0, local rank 0" in run.text
    assert "exited with code 203" in run.text
    assert max(e["step"] for e in run.events("step")) <= 10
    assert (ckpt / "latest").read_text().strip() == "step-8"
    assert not list(ckpt.glob(".tmp-*"))


@pytest.mark.timeout(120)
def test_rerun_resumes_from_newest_checkpoint_exactly(killed, uninterrupted, tmp_path):
    _, killed_dir = killed
    ckpt = tmp_path / "ckpt"
    shutil.copytree(killed_dir, ckpt)
    run = run_job(ddp(ckpt), nodes=2)
    assert_ok(run)
    assert sorted((e["rank"], e["step"]) for e in run.events("resume")) == [(0, 8), (1, 8)]
    assert {e["rank"] for e in run.events("step")} == {0, 1}
    assert min(e["step"] for e in run.events("step")) == 10
    assert_same_params(final_state(ckpt), uninterrupted)


@pytest.mark.timeout(150)
def test_gang_restart_resumes_and_finishes_exactly(uninterrupted, tmp_path):
    run = run_job(ddp(tmp_path), nodes=2, KDIST_FAULT_KILL_AT="1:10", KDIST_MAX_RESTARTS="1")
    assert_ok(run)
    # Both nodes restarted their workers, which resumed from step 8.
    assert sorted((e["rank"], e["step"]) for e in run.events("resume")) == [(0, 8), (1, 8)]
    assert {e["rank"] for e in run.events("done")} == {0, 1}
    assert_same_params(final_state(tmp_path), uninterrupted)


@pytest.mark.timeout(90)
@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
@pytest.mark.parametrize(("dtype", "expected"), [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_dtype_runs_the_forward_in_that_dtype(dtype, expected, tmp_path):
    seen: set[torch.dtype] = set()

    def record(module, inputs, output):
        if isinstance(module, torch.nn.Linear):
            seen.add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        assert ddp_workload.main(ddp(tmp_path, "--max-steps", "2", "--dtype", dtype)[3:]) == 0
    finally:
        handle.remove()
    assert seen == {expected}
    # Parameters and optimizer state stay fp32 whatever the compute dtype.
    assert {t.dtype for t in final_state(tmp_path)["model"].values()} == {torch.float32}


# torch's bf16 hook wants NCCL (>= 2.10) even for gloo: a CPU-only build (Debian's) refuses it.
NEEDS_NCCL = pytest.mark.skipif(not dist.is_nccl_available(),
                                reason="torch's bf16 compression hook needs a torch with NCCL")


@pytest.mark.parametrize(("compression", "hook"), [
    ("none", None), pytest.param("bf16", "bf16_compress_hook", marks=NEEDS_NCCL),
    ("fp16", "fp16_compress_hook")])
def test_wrap_sets_buckets_and_the_compression_hook(compression, hook):
    args = ddp_workload.build_parser().parse_args(
        [*TINY, "--grad-compression", compression, "--bucket-cap-mb", "0.5"])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        wrapped = ddp_workload.wrap(ddp_workload.build_model(args), args,
                                    Dist(0, 1, 0, "gloo", torch.device("cpu")))
        data = wrapped._get_ddp_logging_data()
    finally:
        dist.destroy_process_group()
    assert data.get("comm_hook") == hook
    assert data["bucket_cap_bytes"] == 512 * 1024
    assert data["gradient_as_bucket_view"] == 1


@pytest.mark.skipif(dist.is_nccl_available(), reason="this torch has NCCL: the hook works")
def test_a_torch_without_nccl_refuses_bf16_compression_by_name():
    args = ddp_workload.build_parser().parse_args([*TINY, "--grad-compression", "bf16"])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(SystemExit, match=r"--grad-compression bf16: torch .* use fp16"):
            ddp_workload.wrap(ddp_workload.build_model(args), args,
                              Dist(0, 1, 0, "gloo", torch.device("cpu")))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
@NEEDS_NCCL
def test_compressed_bf16_training_follows_the_fp32_run(uninterrupted, tmp_path):
    run = run_job(ddp(tmp_path, "--grad-compression", "bf16", "--dtype", "bf16"), nodes=2)
    assert_ok(run)
    assert {e["rank"] for e in run.events("done")} == {0, 1}
    low = final_state(tmp_path)
    for name, value in uninterrupted["model"].items():
        torch.testing.assert_close(low["model"][name], value, atol=0.05, rtol=0.05, msg=name)
