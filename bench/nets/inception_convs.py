"""Three NCHW convolutions of Inception-v3's 35x35 blocks (a 5x5, a 3x3, a strided 3x3): shapes no
collected store holds, to ask whether a prior trained on other NCHW convolutions carries over.

    python bench/network.py --network bench/nets/inception_convs.py:make_model --input-shape 1,48,35,35 ...
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["make_model"]


def make_model() -> nn.Module:
    """48 -> 64 (5x5), 64 -> 96 (3x3), 96 -> 96 (3x3, stride 2), with ReLUs; seeded weights."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(48, 64, 5, padding=2, bias=False),
        nn.ReLU(),
        nn.Conv2d(64, 96, 3, padding=1, bias=False),
        nn.ReLU(),
        nn.Conv2d(96, 96, 3, stride=2, bias=False),
    ).eval()
