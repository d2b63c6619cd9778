"""One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072) in plain PyTorch, sequence 128.

No download: the weights are seeded random.

    autosearch tune-model examples/bert_layer.py:make_model --input-shape 1,128,768 --trials 256
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["BertLayer", "make_model"]


class BertLayer(nn.Module):
    """Self-attention + feed-forward, each with a residual and a post layer norm (BERT's order)."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.heads, self.dk = heads, hidden // heads
        self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.heads, self.dk).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dk), dim=-1)
        ctx = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(b, s, h)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return BertLayer().eval()
