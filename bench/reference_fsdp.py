"""The reference: a minimal hand-written FSDP2 (or DDP, or plain) script, as one would write it.

    torchrun --nproc-per-node 2 bench/reference_fsdp.py --max-steps 60 [--wrap fsdp|ddp|none]

The same transformer, tokens, batch order and AdamW as ``kdist.workloads.fsdp``
(rebuilt here from the same seeds, not imported, so no kdist code runs):
``fully_shard`` per block and at the root (``--wrap fsdp``, the default),
DistributedDataParallel with its defaults (``ddp``), or the bare model in one
process (``none``). Prints kdist's JSON step lines (docs/DESIGN.md, "JSON
log lines") so the benchmark reads both the same way. Standalone on purpose.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data.distributed import DistributedSampler


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.head_dim = dim // heads
        self.attn_norm = nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.mlp_norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_norm(x)
        b, s, _ = h.shape
        q, k, v = (p(h).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).flatten(2))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class Transformer(nn.Module):
    def __init__(self, vocab: int, seq_len: int, dim: int, heads: int, layers: int, ffn: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq_len, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    add = p.add_argument
    add("--wrap", choices=["fsdp", "ddp", "none"], default="fsdp")
    add("--max-steps", type=int, default=60)
    add("--batch-size", type=int, default=16)
    add("--log-every", type=int, default=10)
    add("--lr", type=float, default=1e-3)
    add("--seed", type=int, default=0)
    add("--dataset-size", type=int, default=8192)
    add("--vocab", type=int, default=256)
    add("--seq-len", type=int, default=64)
    add("--hidden", type=int, default=256)
    add("--heads", type=int, default=4)
    add("--layers", type=int, default=4)
    args = p.parse_args()

    if args.wrap != "none":
        dist.init_process_group("gloo")
    rank = dist.get_rank() if args.wrap != "none" else 0
    world = dist.get_world_size() if args.wrap != "none" else 1

    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randint(args.vocab, (args.dataset_size, args.seq_len), generator=gen)
    y = (x + F.pad(x, (1, -1))) % args.vocab
    torch.manual_seed(args.seed)
    model = Transformer(args.vocab, args.seq_len, args.hidden, args.heads, args.layers,
                        4 * args.hidden)
    net: nn.Module = model
    if args.wrap == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    elif args.wrap == "ddp":
        net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    sampler = DistributedSampler(range(args.dataset_size), num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)
    per_epoch = len(sampler) // args.batch_size
    started, order = time.perf_counter(), torch.empty(0, dtype=torch.long)
    for step in range(args.max_steps):
        epoch, offset = divmod(step, per_epoch)
        if offset == 0:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler))
        idx = order[offset * args.batch_size:(offset + 1) * args.batch_size]
        logits = net(x[idx])
        loss = F.cross_entropy(logits.float().flatten(0, 1), y[idx].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % args.log_every == 0:
            now = time.perf_counter()
            rate = args.log_every * args.batch_size * world / (now - started)
            emit({"event": "step", "step": step + 1, "loss": loss.item(),
                  "samples_per_s": round(rate, 1), "rank": rank, "world_size": world})
            started = time.perf_counter()
    emit({"event": "done", "step": args.max_steps, "rank": rank, "world_size": world,
          "pid": os.getpid()})
    if args.wrap != "none":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
