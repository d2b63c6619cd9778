"""The benchmark's model zoo: HuggingFace `transformers` architectures built from a config (random
weights, nothing downloaded), each returning one tensor so the output check reads one array, and
two convnets transformers has no architecture for (ShuffleNetV2's channel shuffle, DenseNet's dense
concatenation) written here after their papers' torchvision layouts.

    autosearch tune-model examples/zoo.py:resnet50 --input x:float32:1,3,224,224 --budget-minutes 10
    autosearch tune-model examples/zoo.py:bert_base --input input_ids:int64:1,128:0..30522
    autosearch tune-model examples/zoo.py:llama_small --input input_ids:int64:1,128:0..32000 --trials 0

The families: decoders (`gpt2_small`, `llama_small`, `mistral_small`, `qwen2_small`), encoders
(`bert_base`, `roberta_base`), vision transformers (`vit_base`, `swin_tiny`), convnets with
residual (`resnet18`, `resnet50`), depthwise (`mobilenet_v1`, `mobilenet_v2`), squeeze-excitation
(`efficientnet_b0`, `regnet_y`, grouped as well), large-kernel depthwise (`convnext_tiny`), channel
shuffle (`shufflenet_v2`) and dense concatenation (`densenet121`) blocks; bench/network.py's ZOO
holds each one's input.

Convolutional models have their BatchNorm statistics calibrated on random data: with the default
statistics (mean 0, variance 1) a deep residual network's output shrinks to ~1e-10, and a check
against it passes anything.
"""

from __future__ import annotations

import torch

__all__ = [
    "bert_base",
    "convnext_tiny",
    "densenet121",
    "efficientnet_b0",
    "gpt2_small",
    "llama_small",
    "mistral_small",
    "mobilenet_v1",
    "mobilenet_v2",
    "qwen2_small",
    "regnet_y",
    "resnet18",
    "resnet50",
    "roberta_base",
    "shufflenet_v2",
    "swin_tiny",
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


def _decoder(config: type, model: type, **extra: object) -> torch.nn.Module:
    """A 4-layer decoder, d 512, 8 query heads sharing 4 key/value heads, rotary positions, with no
    key/value cache kept (a whole-sequence forward: the attention mask comes from the position ids,
    as in training)."""
    torch.manual_seed(0)
    cfg = config(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        use_cache=False,
        **extra,
    )
    return _Main(model(cfg), "last_hidden_state").eval()


def llama_small() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaModel

    return _decoder(LlamaConfig, LlamaModel)


def mistral_small() -> torch.nn.Module:
    """Mistral's sliding-window attention, the window (64) shorter than the zoo's 128 tokens."""
    from transformers import MistralConfig, MistralModel

    return _decoder(MistralConfig, MistralModel, sliding_window=64)


def qwen2_small() -> torch.nn.Module:
    """Qwen2: Llama's layout with biases on the query, key and value projections."""
    from transformers import Qwen2Config, Qwen2Model

    return _decoder(Qwen2Config, Qwen2Model)


def roberta_base() -> torch.nn.Module:
    """RoBERTa: BERT's layout, its position ids counted from the token ids at run time (a `cumsum`
    over the non-padding tokens)."""
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(0)
    return _Main(RobertaModel(RobertaConfig(), add_pooling_layer=False), "last_hidden_state").eval()


def swin_tiny() -> torch.nn.Module:
    """Swin-T: attention within 7x7 windows, shifted every other block (a roll and a mask)."""
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(0)
    return _Main(SwinModel(SwinConfig()), "pooler_output").eval()


def regnet_y() -> torch.nn.Module:
    """RegNetY (transformers' default config): grouped 3x3 convolutions and squeeze-excitation."""
    from transformers import RegNetConfig, RegNetModel

    torch.manual_seed(0)
    return _calibrated(_Main(RegNetModel(RegNetConfig()), "pooler_output"))


def mobilenet_v1() -> torch.nn.Module:
    """MobileNetV1: depthwise-separable convolutions, no residual."""
    from transformers import MobileNetV1Config, MobileNetV1Model

    torch.manual_seed(0)
    return _calibrated(_Main(MobileNetV1Model(MobileNetV1Config()), "pooler_output"))


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = [
        torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        torch.nn.BatchNorm2d(cout),
    ]
    if relu:
        layers.append(torch.nn.ReLU(inplace=True))
    return torch.nn.Sequential(*layers)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """ShuffleNet's shuffle: channels regrouped so each group sees every other group's outputs."""
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleUnit(torch.nn.Module):
    """ShuffleNetV2's unit: a channel split (stride 1) or two strided branches (stride 2), a
    depthwise 3x3 between pointwise convolutions, concatenation, then the channel shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.left = torch.nn.Sequential(
                _conv_bn(cin, cin, 3, stride, groups=cin, relu=False), _conv_bn(cin, half, 1)
            )
        bin_ = cin if stride > 1 else half
        self.right = torch.nn.Sequential(
            _conv_bn(bin_, half, 1), _conv_bn(half, half, 3, stride, groups=half, relu=False), _conv_bn(half, half, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.right(b)], dim=1)
        else:
            out = torch.cat([self.left(x), self.right(x)], dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(torch.nn.Module):
    """ShuffleNetV2 1.0x (torchvision's layout): stages of 4, 8, 4 units, 116-232-464 channels."""

    def __init__(
        self, stages: tuple[int, ...] = (4, 8, 4), widths: tuple[int, ...] = (24, 116, 232, 464, 1024)
    ) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(_conv_bn(3, widths[0], 3, 2), torch.nn.MaxPool2d(3, 2, 1))
        units: list[torch.nn.Module] = []
        cin = widths[0]
        for repeats, cout in zip(stages, widths[1:-1]):
            units += [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            cin = cout
        self.stages = torch.nn.Sequential(*units)
        self.head = _conv_bn(cin, widths[-1], 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x))).mean(dim=(2, 3))


class DenseLayer(torch.nn.Module):
    """DenseNet-BC's layer: BN-ReLU-1x1 (4 x growth) then BN-ReLU-3x3 (growth), its output
    concatenated to everything before it."""

    def __init__(self, cin: int, growth: int, bottleneck: int = 4) -> None:
        super().__init__()
        mid = bottleneck * growth
        self.body = torch.nn.Sequential(
            torch.nn.BatchNorm2d(cin),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(cin, mid, 1, bias=False),
            torch.nn.BatchNorm2d(mid),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(mid, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], dim=1)


class DenseNet(torch.nn.Module):
    """DenseNet-BC (torchvision's layout; 121 layers by default): dense blocks joined by
    transitions that halve the channels (1x1) and the image (2x2 average pool)."""

    def __init__(self, blocks: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32, stem: int = 64) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = [
            torch.nn.Conv2d(3, stem, 7, 2, 3, bias=False),
            torch.nn.BatchNorm2d(stem),
            torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(3, 2, 1),
        ]
        c = stem
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                layers += [
                    torch.nn.BatchNorm2d(c),
                    torch.nn.ReLU(inplace=True),
                    torch.nn.Conv2d(c, c // 2, 1, bias=False),
                    torch.nn.AvgPool2d(2, 2),
                ]
                c //= 2
        layers += [torch.nn.BatchNorm2d(c), torch.nn.ReLU(inplace=True)]
        self.features = torch.nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x).mean(dim=(2, 3))


def shufflenet_v2() -> torch.nn.Module:
    torch.manual_seed(0)
    return _calibrated(ShuffleNetV2())


def densenet121() -> torch.nn.Module:
    torch.manual_seed(0)
    return _calibrated(DenseNet())
