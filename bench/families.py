"""Does every model a user brings build? Tiny instances (one layer, width 32, 16 tokens or a 32x32
image) of the transformers architectures outside examples/zoo.py, and hand-written nets with
operators the zoo lacks (PReLU, ELU, Mish, GroupNorm, InstanceNorm, transposed convolutions,
bilinear upsampling, pixel shuffle, einsum, LSTM, GRU, Conv1d), each imported, passed through the graph
passes, built with TVM's untuned kernels and run beside PyTorch, in a process of its own (a crash
or a hang is that model's row, not the end of the sweep).

    python bench/families.py                       # every architecture, ~10 minutes on 2 cores
    python bench/families.py --only beit,lstm      # some

Prints one row a model (ok, refused with its one line, MISMATCH, INTERNAL error) and one line:
how many built and matched, how many were refused naming an operator, how many failed otherwise.
An architecture this transformers version lacks, or whose config it rejects, is `unavailable`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VOCAB, TOKENS, IMAGE = 128, 16, 32
DEC = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
DEC |= {"num_attention_heads": 4, "max_position_embeddings": 64}
GQA = {**DEC, "num_key_value_heads": 2}
VIT = {"image_size": IMAGE, "patch_size": 8, "hidden_size": 32, "intermediate_size": 64}
VIT |= {"num_hidden_layers": 1, "num_attention_heads": 4}
AUDIO = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 64}
AUDIO |= {"conv_dim": (16, 16, 16), "conv_stride": (5, 2, 2), "conv_kernel": (10, 3, 3)}
AUDIO |= {"num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}


def _hf(model: str, config: str, attr: str = "last_hidden_state", **kw: Any) -> Callable[[], Any]:
    """A transformers model from its config, its `attr` output as one tensor."""

    extra = kw.pop("model_kwargs", {})

    def make() -> Any:
        import transformers

        cls = getattr(transformers, model, None) or _submodule_class(model)
        return _zoo()._Main(cls(getattr(transformers, config)(**kw), **extra), attr)

    return make


def _submodule_class(name: str) -> Any:
    if name == "WhisperEncoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        return WhisperEncoder
    raise AttributeError(name)


def _hand(name: str) -> Callable[[], Any]:
    def make() -> Any:
        return getattr(_nets(), name)()

    return make


def _nets() -> Any:
    """The hand-written nets (torch imported only when one is made)."""
    import torch
    from torch import nn
    from torch.nn import functional as fn

    class Squeeze(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x: Any) -> Any:
            return x * fn.hardsigmoid(self.b(fn.relu(self.a(fn.adaptive_avg_pool2d(x, 1)))))

    class MobileV3Block(nn.Module):
        def __init__(self, cin: int, mid: int, cout: int, k: int, stride: int, se: bool) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.Hardswish(),
                nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                nn.Hardswish(),
                Squeeze(mid) if se else nn.Identity(),
                nn.Conv2d(mid, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV3Blocks(nn.Module):
        """Hardswish, hardsigmoid squeeze-excitation, 5x5 depthwise convolutions, a classifier."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
            self.blocks = nn.Sequential(MobileV3Block(16, 48, 24, 3, 2, False), MobileV3Block(24, 72, 24, 5, 1, True))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 32), nn.Hardswish())

        def forward(self, x: Any) -> Any:
            return self.head(self.blocks(self.stem(x)))

    class UNet(nn.Module):
        """GroupNorm, InstanceNorm, SiLU, LeakyReLU, a transposed convolution, bilinear upsampling."""

        def __init__(self) -> None:
            super().__init__()
            self.e1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
            self.e2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU())
            self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
            self.d = nn.Sequential(
                nn.Conv2d(32, 16, 3, padding=1), nn.InstanceNorm2d(16, affine=True), nn.LeakyReLU(0.1)
            )
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x: Any) -> Any:
            a = self.e1(x)
            b = self.e2(fn.max_pool2d(a, 2))
            y = self.out(self.d(torch.cat([self.up(b), a], 1)))
            return fn.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)

    class Activations(nn.Module):
        """PReLU, ELU, Mish after a blocked convolution, ceil-mode and no-padding-count pools, a pixel
        shuffle, a partial adaptive pool, einsum, GLU and tanh GELU."""

        def __init__(self) -> None:
            super().__init__()
            self.c, self.p = nn.Conv2d(3, 16, 3, padding=1), nn.PReLU(16)
            self.c2, self.lin = nn.Conv2d(16, 32, 3, padding=1), nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            y = self.p(self.c(x))
            y = fn.elu(y) + fn.mish(y)
            y = fn.avg_pool2d(fn.max_pool2d(y, 3, 2, ceil_mode=True), 3, 1, 1, count_include_pad=False)
            y = fn.adaptive_avg_pool2d(fn.pixel_shuffle(self.c2(y), 2), (4, 4))
            z = torch.einsum("bchw,bcw->bch", y, y.mean(2))
            z = fn.glu(torch.cat([z, z.flip(-1)], -1), -1)
            return self.lin(fn.gelu(z, approximate="tanh").repeat(1, 1, 2)).softmax(-1)

    class Upsamplers(nn.Module):
        """A GAN generator's 4x4 stride-2 padding-1 transposed convolution and a decoder's 3x3
        stride-2 one with an output padding, BatchNorm, ReLU, tanh."""

        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1),
                nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.ConvTranspose2d(8, 4, 3, 2, 1, output_padding=1),
                nn.Tanh(),
            )

        def forward(self, x: Any) -> Any:
            return self.body(x)

    class Recurrent(nn.Module):
        def __init__(self, kind: str) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 32)
            self.rnn = (
                nn.LSTM(32, 32, batch_first=True)
                if kind == "lstm"
                else nn.GRU(32, 32, batch_first=True, bidirectional=True)
            )
            self.out = nn.Linear(self.rnn.hidden_size * (2 if self.rnn.bidirectional else 1), 8)

        def forward(self, x: Any) -> Any:
            return self.out(self.rnn(self.embed(x))[0])

    class Conv1d(nn.Module):
        """Strided, grouped and dilated 1-D convolutions over a waveform."""

        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Conv1d(1, 16, 9, stride=4, padding=4)
            self.n = nn.BatchNorm1d(16)
            self.c2 = nn.Conv1d(16, 16, 5, groups=4, dilation=2, padding=4)

        def forward(self, x: Any) -> Any:
            return self.c2(torch.relu(self.n(self.c(x.unsqueeze(1))))).mean(-1)

    class Nets:
        mobilenet_v3_blocks = MobileNetV3Blocks
        unet = UNet
        activations = Activations
        upsamplers = Upsamplers
        lstm = staticmethod(lambda: Recurrent("lstm"))
        gru_bidirectional = staticmethod(lambda: Recurrent("gru"))
        conv1d = Conv1d

    return Nets


#: name: (family, maker, input: ids | image | wave | mel)
ARCHS: dict[str, tuple[str, Callable[[], Any], str]] = {
    "phi": ("decoder", _hf("PhiModel", "PhiConfig", **DEC), "ids"),
    "phi3": ("decoder", _hf("Phi3Model", "Phi3Config", **GQA, pad_token_id=0), "ids"),
    "gemma2": ("decoder", _hf("Gemma2Model", "Gemma2Config", **GQA, head_dim=8), "ids"),
    "gemma3": ("decoder", _hf("Gemma3TextModel", "Gemma3TextConfig", **GQA, head_dim=8, sliding_window=8), "ids"),
    "gpt_neox": ("decoder", _hf("GPTNeoXModel", "GPTNeoXConfig", **DEC), "ids"),
    "falcon": (
        "decoder",
        _hf(
            "FalconModel", "FalconConfig", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4
        ),
        "ids",
    ),
    "opt": (
        "decoder",
        _hf(
            "OPTModel",
            "OPTConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
        ),
        "ids",
    ),
    "bloom": (
        "decoder",
        _hf("BloomModel", "BloomConfig", vocab_size=VOCAB, hidden_size=32, n_layer=1, n_head=4),
        "ids",
    ),
    "gptj": (
        "decoder",
        _hf("GPTJModel", "GPTJConfig", vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4, rotary_dim=4, n_positions=64),
        "ids",
    ),
    "stablelm": ("decoder", _hf("StableLmModel", "StableLmConfig", **GQA), "ids"),
    "starcoder2": ("decoder", _hf("Starcoder2Model", "Starcoder2Config", **GQA), "ids"),
    "olmo": ("decoder", _hf("OlmoModel", "OlmoConfig", **GQA), "ids"),
    "qwen3": ("decoder", _hf("Qwen3Model", "Qwen3Config", **GQA, head_dim=8), "ids"),
    "granite": ("decoder", _hf("GraniteModel", "GraniteConfig", **GQA), "ids"),
    "codegen": (
        "decoder",
        _hf(
            "CodeGenModel",
            "CodeGenConfig",
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=1,
            n_head=4,
            rotary_dim=4,
            n_positions=64,
        ),
        "ids",
    ),
    "mpt": (
        "decoder",
        _hf("MptModel", "MptConfig", vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=4, max_seq_len=64),
        "ids",
    ),
    "gpt_bigcode": (
        "decoder",
        _hf("GPTBigCodeModel", "GPTBigCodeConfig", vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4, n_positions=64),
        "ids",
    ),
    "cohere": ("decoder", _hf("CohereModel", "CohereConfig", **GQA), "ids"),
    "distilbert": (
        "encoder",
        _hf(
            "DistilBertModel",
            "DistilBertConfig",
            vocab_size=VOCAB,
            dim=32,
            hidden_dim=64,
            n_layers=1,
            n_heads=4,
            max_position_embeddings=64,
        ),
        "ids",
    ),
    "albert": (
        "encoder",
        _hf("AlbertModel", "AlbertConfig", **DEC, embedding_size=16, model_kwargs={"add_pooling_layer": False}),
        "ids",
    ),
    "electra": ("encoder", _hf("ElectraModel", "ElectraConfig", **DEC, embedding_size=16), "ids"),
    "deberta": ("encoder", _hf("DebertaModel", "DebertaConfig", **DEC), "ids"),
    "deberta_v2": ("encoder", _hf("DebertaV2Model", "DebertaV2Config", **DEC), "ids"),
    "mpnet": ("encoder", _hf("MPNetModel", "MPNetConfig", **DEC, model_kwargs={"add_pooling_layer": False}), "ids"),
    "xlm_roberta": (
        "encoder",
        _hf("XLMRobertaModel", "XLMRobertaConfig", **DEC, model_kwargs={"add_pooling_layer": False}),
        "ids",
    ),
    "t5_encoder": (
        "encoder",
        _hf("T5EncoderModel", "T5Config", vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4),
        "ids",
    ),
    "modernbert": ("encoder", _hf("ModernBertModel", "ModernBertConfig", **DEC, pad_token_id=0), "ids"),
    "fnet": (
        "encoder",
        _hf(
            "FNetModel",
            "FNetConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            max_position_embeddings=64,
            model_kwargs={"add_pooling_layer": False},
        ),
        "ids",
    ),
    "deit": (
        "vision transformer",
        _hf("DeiTModel", "DeiTConfig", **VIT, model_kwargs={"add_pooling_layer": False}),
        "image",
    ),
    "beit": (
        "vision transformer",
        _hf(
            "BeitModel", "BeitConfig", **VIT, use_relative_position_bias=True, model_kwargs={"add_pooling_layer": False}
        ),
        "image",
    ),
    "dinov2": (
        "vision transformer",
        _hf(
            "Dinov2Model",
            "Dinov2Config",
            image_size=IMAGE,
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
        ),
        "image",
    ),
    "levit": (
        "vision transformer",
        _hf(
            "LevitModel",
            "LevitConfig",
            "pooler_output",
            image_size=IMAGE,
            hidden_sizes=[16, 32, 48],
            num_attention_heads=[1, 2, 3],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
        ),
        "image",
    ),
    "swinv2": (
        "vision transformer",
        _hf(
            "Swinv2Model",
            "Swinv2Config",
            "pooler_output",
            image_size=IMAGE,
            patch_size=4,
            embed_dim=16,
            depths=[2],
            num_heads=[2],
            window_size=4,
        ),
        "image",
    ),
    "pvt": (
        "vision transformer",
        _hf(
            "PvtModel",
            "PvtConfig",
            image_size=IMAGE,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            num_encoder_blocks=2,
            sequence_reduction_ratios=[2, 1],
            num_attention_heads=[1, 2],
            patch_sizes=[4, 2],
            strides=[4, 2],
            mlp_ratios=[2, 2],
        ),
        "image",
    ),
    "segformer": (
        "vision transformer",
        _hf(
            "SegformerModel",
            "SegformerConfig",
            hidden_sizes=[16, 32],
            depths=[1, 1],
            num_encoder_blocks=2,
            sr_ratios=[2, 1],
            num_attention_heads=[1, 2],
            decoder_hidden_size=32,
        ),
        "image",
    ),
    "mobilevit": (
        "vision transformer",
        _hf(
            "MobileViTModel",
            "MobileViTConfig",
            "pooler_output",
            image_size=IMAGE,
            hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
        ),
        "image",
    ),
    "convnextv2": (
        "convnet",
        _hf("ConvNextV2Model", "ConvNextV2Config", "pooler_output", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
        "image",
    ),
    "efficientnet": (
        "convnet",
        _hf(
            "EfficientNetModel",
            "EfficientNetConfig",
            "pooler_output",
            image_size=IMAGE,
            width_coefficient=0.25,
            depth_coefficient=0.25,
            hidden_dim=320,
        ),
        "image",
    ),
    "poolformer": (
        "convnet",
        _hf("PoolFormerModel", "PoolFormerConfig", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
        "image",
    ),
    "resnet_hf": (
        "convnet",
        _hf("ResNetModel", "ResNetConfig", "pooler_output", embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]),
        "image",
    ),
    "mobilenet_v2_hf": (
        "convnet",
        _hf("MobileNetV2Model", "MobileNetV2Config", "pooler_output", image_size=IMAGE, depth_multiplier=0.35),
        "image",
    ),
    "focalnet": (
        "convnet",
        _hf(
            "FocalNetModel",
            "FocalNetConfig",
            "pooler_output",
            image_size=IMAGE,
            embed_dim=16,
            depths=[1, 1],
            hidden_sizes=[16, 32],
        ),
        "image",
    ),
    "mobilenet_v3_blocks": ("convnet", _hand("mobilenet_v3_blocks"), "image"),
    "unet": ("convnet", _hand("unet"), "image"),
    "activations": ("convnet", _hand("activations"), "image"),
    "upsamplers": ("convnet", _hand("upsamplers"), "image"),
    "wav2vec2": ("audio", _hf("Wav2Vec2Model", "Wav2Vec2Config", **AUDIO), "wave"),
    "hubert": ("audio", _hf("HubertModel", "HubertConfig", **AUDIO), "wave"),
    "whisper_encoder": (
        "audio",
        _hf(
            "WhisperEncoder",
            "WhisperConfig",
            vocab_size=VOCAB,
            d_model=32,
            encoder_layers=1,
            encoder_attention_heads=4,
            encoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=50,
        ),
        "mel",
    ),
    "conv1d": ("audio", _hand("conv1d"), "wave"),
    "lstm": ("recurrent", _hand("lstm"), "ids"),
    "gru_bidirectional": ("recurrent", _hand("gru_bidirectional"), "ids"),
}


def _input(kind: str) -> Any:
    import numpy as np

    from autosearch.networks.inputs import InputSpec

    rng = np.random.default_rng(0)
    if kind == "ids":
        ids = rng.integers(0, VOCAB, (1, TOKENS)).astype(np.int64)
        return InputSpec("input_ids", "int64", ids.shape, 0, VOCAB), ids
    x = {
        "image": lambda: rng.random((1, 3, IMAGE, IMAGE), dtype=np.float32),
        "wave": lambda: rng.standard_normal((1, 1600)).astype(np.float32),
        "mel": lambda: rng.standard_normal((1, 16, 100)).astype(np.float32),
    }[kind]()
    return InputSpec("x", "float32", x.shape), x


def _zoo() -> Any:
    """examples/zoo.py: its one-output wrapper and its BatchNorm calibration serve here too."""
    sys.path.insert(0, str(ROOT / "examples"))
    import zoo  # type: ignore[import-not-found]

    return zoo


def _calibrated(net: Any, kind: str) -> Any:
    """BatchNorm statistics from a few random batches (as examples/zoo.py), then eval mode."""
    import torch

    if kind == "image":
        return _zoo()._calibrated(net, (4, 3, IMAGE, IMAGE))
    if kind != "wave":
        return net.eval()
    net.train()
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(4, 1600))
    return net.eval()


def one(name: str) -> dict[str, Any]:
    """Make, import, build, run and check one architecture; its row."""
    import torch
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.target import host_target
    from autosearch.errors import AutosearchError
    from autosearch.networks.check import compare_outputs, flatten_outputs
    from autosearch.networks.graph import build_network, import_network
    from autosearch.networks.tune import reference_outputs

    _, make, kind = ARCHS[name]
    try:
        torch.manual_seed(0)
        net = _calibrated(make(), kind)
    except Exception as e:  # this transformers version has no such model or config
        return {"result": "unavailable", "detail": f"{type(e).__name__}: {e}"}
    spec, x = _input(kind)
    try:
        target = host_target()
        graph = import_network(name, net, [spec], [x], target, fast_math=True)
        built = build_network(graph, ms.database.MemoryDatabase(), target)
        got = flatten_outputs(relax.VirtualMachine(built, tvm.cpu())["main"](tvm.runtime.tensor(x)))
        check = compare_outputs(got, reference_outputs(net, [x]))
    except AutosearchError as e:
        return {"result": "refused", "detail": str(e)}
    except Exception as e:  # what this sweep is for
        return {"result": "INTERNAL", "detail": f"{type(e).__name__}: {str(e)[-300:]}"}
    return {"result": "ok" if check.ok else "MISMATCH", "detail": check.describe()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated names (default: all)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a model")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process's job
    args = ap.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args.one)), flush=True)
        return 0
    names = [n for n in args.only.split(",") if n] or list(ARCHS)
    unknown = [n for n in names if n not in ARCHS]
    if unknown:
        print(f"families: unknown model(s) {', '.join(unknown)}; known: {', '.join(ARCHS)}", file=sys.stderr)
        return 2
    from autosearch.backends.tvm.target import host_cpu

    rows = []
    print(f"# tiny models built untuned and checked against PyTorch, on {host_cpu()}\n")
    print("| model | family | result | seconds | detail |\n|---|---|---|---|---|")
    for n in names:
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--one", n], capture_output=True, text=True, timeout=args.timeout
            )
            line = [x for x in done.stdout.splitlines() if x.startswith("ROW ")]
            row = (
                json.loads(line[-1][4:])
                if line
                else {
                    "result": "INTERNAL",
                    "detail": f"the process died ({done.returncode}): {done.stderr.strip()[-200:]}",
                }
            )
        except subprocess.TimeoutExpired:
            row = {"result": "INTERNAL", "detail": f"no answer in {args.timeout:.0f} s"}
        row |= {"model": n, "family": ARCHS[n][0], "seconds": round(time.perf_counter() - t0, 1)}
        rows.append(row)
        detail = " ".join(row["detail"].split())[:160].replace("|", "/")
        print(f"| {n} | {row['family']} | {row['result']} | {row['seconds']} | {detail} |", flush=True)
    count = {k: sum(r["result"] == k for r in rows) for k in ("ok", "refused", "MISMATCH", "INTERNAL", "unavailable")}
    print(
        f"\nFAMILIES built and matched {count['ok']} of {len(rows) - count['unavailable']}; refused in one line "
        f"{count['refused']}; mismatched {count['MISMATCH']}; internal errors {count['INTERNAL']}"
        f" ({count['unavailable']} unavailable in this transformers)"
    )
    if args.json:
        args.json.write_text(json.dumps({"cpu": host_cpu(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
