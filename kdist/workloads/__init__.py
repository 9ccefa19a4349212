"""Training workloads the image ships, each run as ``python -m kdist.workloads.NAME``.

- ``ddp``: data parallel (DistributedDataParallel + DistributedSampler).
- ``pipeline``: pipeline model parallel (``torch.distributed.pipelining``),
  optionally DP x PP.
- ``fsdp``: sharded data parallel (FSDP2, ``fully_shard``), optionally x tensor
  parallel on a 2-D mesh, with DCP checkpoints that load at any world size.

All read the environment the launcher sets (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``KDIST_DIST_BACKEND``, ``KDIST_PG_TIMEOUT``,
``KDIST_CHECKPOINT_DIR``), take the common flags of
``kdist.workloads.common.add_loop_args`` and print one JSON object per line
on stdout (``step``, ``resume``, ``checkpoint``, ``done`` events); nothing
else on stdout. Without a launcher they run as a single process.
"""
