"""A segmentation U-Net outside the zoo: four levels of 32-256 channels, two 3x3 convolutions a
level each followed by GroupNorm(8) + SiLU, max-pool down, 2x2 stride-2 transposed convolutions
up, the skips concatenated (~3.6 GFLOP at 128x128).

    python bench/network.py --network bench/nets/unet.py:make_model --input x:float32:1,3,128,128 --minutes 0
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["make_model"]


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.GroupNorm(8, cout),
        nn.SiLU(),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.GroupNorm(8, cout),
        nn.SiLU(),
    )


class UNet(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256)) -> None:
        super().__init__()
        self.down = nn.ModuleList()
        cin = 3
        for w in widths:
            self.down.append(_block(cin, w))
            cin = w
        self.ups = nn.ModuleList(nn.ConvTranspose2d(w, w // 2, 2, stride=2) for w in widths[:0:-1])
        self.up_blocks = nn.ModuleList(_block(w, w // 2) for w in widths[:0:-1])
        self.out = nn.Conv2d(widths[0], 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = nn.functional.max_pool2d(x, 2)
        for up, block in zip(self.ups, self.up_blocks):
            x = block(torch.cat([up(x), skips.pop()], 1))
        return self.out(x)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return UNet().eval()
