"""The FSDP2 workload's model and data: a small decoder-only transformer on synthetic tokens.

The task is learnable and needs attention: token t's label is
``(x[t-1] + x[t]) mod vocab``, so each position must look one step back
(causal attention). Tokens are uniform random from ``--seed``, made on the
CPU so every device agrees; no downloads.

The linear layers are named for tensor parallelism (``TP_PLAN``): q, k, v
and the MLP's up projection are split by output features (column-wise), o
and down by input features (row-wise), so each block needs one all-reduce
in attention and one in the MLP, and each rank computes ``heads / tp``
heads. Embeddings, norms and the output head stay whole in the TP group.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def add_model_args(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--vocab", type=int, default=256, help="vocabulary size (default 256)")
    add("--seq-len", type=int, default=64, help="tokens per sample (default 64)")
    add("--hidden", type=int, default=256, help="model width (default 256)")
    add("--heads", type=int, default=4, help="attention heads; --hidden must divide (default 4)")
    add("--layers", type=int, default=4, help="transformer blocks (default 4)")
    add("--ffn", type=int, default=0, help="MLP width (default 4 x --hidden)")


def check_model_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("vocab", "seq_len", "heads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.ffn < 0:
        parser.error("--ffn must be >= 0")
    args.ffn = args.ffn or 4 * args.hidden
    if args.hidden % args.heads:
        parser.error(f"--heads {args.heads} must divide --hidden {args.hidden}")


class Block(nn.Module):
    """Pre-norm attention and MLP, each with a residual connection."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.head_dim = dim // heads
        self.attn_norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)
        self.checkpointed = False

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        # -1, not the head count: under TP this rank's projections carry heads / tp heads.
        b, s, _ = t.shape
        return t.view(b, s, -1, self.head_dim).transpose(1, 2)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_norm(x)
        a = F.scaled_dot_product_attention(self._heads(self.q(h)), self._heads(self.k(h)),
                                           self._heads(self.v(h)), is_causal=True)
        x = x + self.o(a.transpose(1, 2).flatten(2))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed and torch.is_grad_enabled():
            # Keep only the block's input; backward recomputes the rest.
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


TP_PLAN = {"q": "colwise", "k": "colwise", "v": "colwise", "o": "rowwise",
           "up": "colwise", "down": "rowwise"}


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


def build_model(args: argparse.Namespace) -> Transformer:
    """The model every rank starts from: the same on every rank (seeded), on the CPU."""
    torch.manual_seed(args.seed)
    return Transformer(args.vocab, args.seq_len, args.hidden, args.heads, args.layers,
                       args.ffn or 4 * args.hidden)


def make_tokens(seed: int, size: int, seq_len: int, vocab: int) -> tuple[torch.Tensor, ...]:
    """``size`` sequences and their labels, ``(x[t-1] + x[t]) mod vocab`` (x[-1] = 0)."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randint(vocab, (size, seq_len), generator=gen)
    y = (x + F.pad(x, (1, -1))) % vocab
    return x, y


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every position, computed in fp32 whatever the logits' dtype."""
    logits = model(x)
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
