"""Bytes of model state one rank holds: ``python -m bench.fsdp_state [--unsharded] FSDP-ARGS``.

After one optimizer step of ``kdist.workloads.fsdp``'s model (sharded as the
workload shards it, or plain with ``--unsharded``), adds up the bytes of
this rank's parameters, gradients (kept: no zero_grad) and AdamW state, each
DTensor counted by its local shard. Prints one JSON line:
``{"event": "state", "rank": R, "params": N, "grads": N, "optimizer": N}``.
An exact count of the tensors, where ``bench.memprobe``'s peak also holds
activations and communication buffers.
"""

from __future__ import annotations

import json
import sys

import torch

from kdist.workloads import fsdp, torchapi
from kdist.workloads.common import Dist, run_workload
from kdist.workloads.transformer import build_model, check_model_args, loss_of, make_tokens


def _bytes(tensors) -> int:
    return sum(torchapi.local(t).numel() * t.element_size() for t in tensors
               if isinstance(t, torch.Tensor))


def measure(model: torch.nn.Module, opt: torch.optim.Optimizer, args, rank: int) -> None:
    x, y = make_tokens(args.seed, args.batch_size, args.seq_len, args.vocab)
    loss_of(model, x, y).backward()
    opt.step()
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values()]
    print(json.dumps({"event": "state", "rank": rank, "params": _bytes(params),
                      "grads": _bytes(p.grad for p in params), "optimizer": _bytes(state)}),
          flush=True)


def main() -> int:
    unsharded = "--unsharded" in sys.argv
    parser = fsdp.build_parser()
    args = parser.parse_args([a for a in sys.argv[1:] if a != "--unsharded"])
    check_model_args(parser, args)
    if unsharded:
        model = build_model(args)
        measure(model, torch.optim.AdamW(model.parameters(), lr=args.lr), args, 0)
        return 0

    def body(d: Dist) -> None:
        model, opt = fsdp.setup(args, d, fsdp.check_layout(parser, args, d.world_size))
        measure(model, opt, args, d.rank)

    return run_workload(body)


if __name__ == "__main__":
    sys.exit(main())
