"""The benchmark's model zoo: HuggingFace `transformers` architectures built from a config (random
weights, nothing downloaded), each returning one tensor so the output check reads one array.

    autosearch tune-model examples/zoo.py:resnet50 --input x:float32:1,3,224,224 --budget-minutes 10
    autosearch tune-model examples/zoo.py:bert_base --input input_ids:int64:1,128:0..30522

Convolutional models have their BatchNorm statistics calibrated on random data: with the default
statistics (mean 0, variance 1) a deep residual network's output shrinks to ~1e-10, and a check
against it passes anything.
"""

from __future__ import annotations

import torch

__all__ = [
    "bert_base",
    "convnext_tiny",
    "efficientnet_b0",
    "gpt2_small",
    "mobilenet_v2",
    "resnet18",
    "resnet50",
    "vit_base",
]


class _Main(torch.nn.Module):
    """One output tensor of a transformers model (`pooler_output` or `last_hidden_state`)."""

    def __init__(self, model: torch.nn.Module, output: str) -> None:
        super().__init__()
        self.model, self.output = model, output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(x), self.output)


def _calibrated(model: torch.nn.Module, shape: tuple[int, ...] = (8, 3, 224, 224)) -> torch.nn.Module:
    """BatchNorm running statistics from a few batches of random images, then eval mode."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the calibration batches
    model.train()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(4):
            model(torch.rand(*shape, generator=g))
    return model.eval()


def resnet50() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    return _calibrated(_Main(ResNetModel(ResNetConfig()), "pooler_output"))


def resnet18() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512])
    return _calibrated(_Main(ResNetModel(cfg), "pooler_output"))


def mobilenet_v2() -> torch.nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    torch.manual_seed(0)
    return _calibrated(_Main(MobileNetV2Model(MobileNetV2Config()), "pooler_output"))


def _torchvision_init(model: torch.nn.Module) -> torch.nn.Module:
    """Convolutions He-initialised (fan out) and BatchNorm scales 1, as torchvision initialises its
    EfficientNet. Why: transformers' EfficientNet draws BatchNorm scales from N(0, 0.02), so the
    activations shrink block after block and B0's output is ~7e-31, near float32's subnormal range,
    where an output check means little; initialised so, it is ~0.5."""
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)
    return model


def efficientnet_b0() -> torch.nn.Module:
    from transformers import EfficientNetConfig, EfficientNetModel

    torch.manual_seed(0)
    cfg = EfficientNetConfig(image_size=224, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)  # B0
    return _calibrated(_Main(_torchvision_init(EfficientNetModel(cfg)), "pooler_output"))


def convnext_tiny() -> torch.nn.Module:
    from transformers import ConvNextConfig, ConvNextModel

    torch.manual_seed(0)
    return _Main(ConvNextModel(ConvNextConfig()), "pooler_output").eval()


def vit_base() -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    return _Main(ViTModel(ViTConfig(), add_pooling_layer=False), "last_hidden_state").eval()


def bert_base() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return _Main(BertModel(BertConfig(), add_pooling_layer=False), "last_hidden_state").eval()


def gpt2_small() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return _Main(GPT2Model(GPT2Config()), "last_hidden_state").eval()
