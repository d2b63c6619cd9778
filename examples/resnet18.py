"""ResNet-18 (He et al. 2016) in plain PyTorch, batch 1 at 224x224, for `autosearch tune-model`.

No download: the weights are seeded random (latency and correctness do not depend on their values).

    autosearch tune-model examples/resnet18.py:make_model --input-shape 1,3,224,224 --trials 512
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BasicBlock", "ResNet18", "make_model"]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (1x1 projection when needed)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        widths = [64, 128, 256, 512]
        layers, cin = [], 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, w, stride), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3), keepdim=True), 1))


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return ResNet18().eval()
