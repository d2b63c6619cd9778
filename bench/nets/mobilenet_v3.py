"""MobileNetV3-Large outside the zoo, after torchvision's layout (5.48 M parameters): hardswish,
hardsigmoid squeeze-excitation, 3x3 and 5x5 depthwise convolutions; He-initialised, BatchNorm
calibrated on random images as examples/zoo.py does.

    python bench/network.py --network bench/nets/mobilenet_v3.py:make_model --input x:float32:1,3,224,224 --minutes 0
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as fn

__all__ = ["make_model"]

#: (in, kernel, expanded, out, squeeze-excitation, hardswish, stride) a block, torchvision's table
LARGE = [
    (16, 3, 16, 16, False, False, 1),
    (16, 3, 64, 24, False, False, 2),
    (24, 3, 72, 24, False, False, 1),
    (24, 5, 72, 40, True, False, 2),
    (40, 5, 120, 40, True, False, 1),
    (40, 5, 120, 40, True, False, 1),
    (40, 3, 240, 80, False, True, 2),
    (80, 3, 200, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 480, 112, True, True, 1),
    (112, 3, 672, 112, True, True, 1),
    (112, 5, 672, 160, True, True, 2),
    (160, 5, 960, 160, True, True, 1),
    (160, 5, 960, 160, True, True, 1),
]


def _divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class _Squeeze(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        s = _divisible(c // 4)
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * fn.hardsigmoid(self.fc2(fn.relu(self.fc1(fn.adaptive_avg_pool2d(x, 1)))))


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)]
    layers.append(nn.BatchNorm2d(cout))
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class _Block(nn.Module):
    def __init__(self, cin: int, k: int, mid: int, cout: int, se: bool, hardswish: bool, stride: int) -> None:
        super().__init__()
        act = nn.Hardswish if hardswish else nn.ReLU
        layers: list[nn.Module] = [] if mid == cin else [_conv_bn(cin, mid, 1, act=act)]
        layers.append(_conv_bn(mid, mid, k, stride, mid, act=act))
        if se:
            layers.append(_Squeeze(mid))
        layers.append(_conv_bn(mid, cout, 1))
        self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        blocks = [_Block(*b) for b in LARGE]
        self.features = nn.Sequential(
            _conv_bn(3, 16, 3, 2, act=nn.Hardswish), *blocks, _conv_bn(160, 960, 1, act=nn.Hardswish)
        )
        self.classifier = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, 1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(fn.adaptive_avg_pool2d(self.features(x), 1), 1))


def make_model() -> nn.Module:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import zoo  # type: ignore[import-not-found]

    torch.manual_seed(0)
    return zoo._calibrated(zoo._torchvision_init(MobileNetV3()))
