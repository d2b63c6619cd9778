"""A model with real trained weights, and how far int8 moves its output on real-looking data.

The zoo's models have random weights (BatchNorm calibrated), whose outputs amplify rounding: its
int8 errors say little about a trained model's. This script fetches one that a PyPI package ships
offline: PP-OCRv4's text detector (a MobileNetV3 backbone with squeeze-excitation, an FPN with
upsampling and transposed convolutions, a DB head; ONNX, 4.7 MB) inside the wheel of
`rapidocr_onnxruntime`, downloaded with `pip download --no-deps` (the registry only) and opened
as a zip: nothing of the package is installed or run, and the file's SHA-256 is pinned. Its data
are rendered text pages (words in random sizes, shades and places on a noisy light page),
normalized as the package's detector does ((x/255 - 0.5) / 0.5), in two sets drawn with
different seeds: a calibration set and a held-out test set.

    python bench/real_weights.py --out DIR                   # fetch + render: DIR/det.onnx, calibration.npy, test.npy
    python bench/real_weights.py --out DIR --build "ours int8=LIB" --build "ours fp32=LIB"

With `--build` (a `tune-model --out` folder or an exported `.so`), every arm runs on every
held-out image: ONNX Runtime fp32 (the reference), ONNX Runtime int8 (`quantize_static` QDQ,
calibrated on the same calibration set), OpenVINO f32 and at its default precision, and each
build. Per arm: the largest error relative to the reference's scale (the output check's measure)
and the text mask's agreement (intersection over union of the pixels above DB's 0.3 threshold,
the step the package's post-processing starts from). Speed is bench/network.py's job:

    python bench/network.py --network DIR/det.onnx --input x:float32:1,3,640,640 --precision int8 \\
        --calibration DIR/calibration.npy --check-input DIR/test.npy --minutes 10 ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PACKAGE = "rapidocr_onnxruntime==1.4.4"
MEMBER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
SHA256 = "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9"
#: DB's binarization threshold in the package's detector config (`Det.thresh`).
MASK_THRESHOLD = 0.3
WORDS = [
    "invoice",
    "total",
    "amount",
    "date",
    "paid",
    "due",
    "balance",
    "account",
    "number",
    "order",
    "ship",
    "street",
    "city",
    "tax",
    "quantity",
    "price",
    "item",
    "description",
    "subtotal",
    "discount",
    "customer",
    "reference",
    "page",
    "note",
    "thank",
    "you",
    "2026",
    "17.50",
    "0042",
    "ABC-113",
    "#9981",
    "12/05",
    "$349.00",
    "100%",
    "Tel:",
    "+1",
    "555",
    "0199",
]


def fetch(out: Path) -> Path:
    """The detector's ONNX file in `out`, from the pinned wheel (downloaded once, never installed)."""
    path = out / "det.onnx"
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != SHA256:
        wheels = out / "wheel"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), PACKAGE], check=True
        )
        wheel = next(wheels.glob("rapidocr_onnxruntime-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            data = z.read(MEMBER)
        digest = hashlib.sha256(data).hexdigest()
        if digest != SHA256:
            raise SystemExit(f"{MEMBER} in {wheel.name} has SHA-256 {digest}, expected {SHA256}")
        path.write_bytes(data)
    return path


def text_page(rng: np.random.Generator, size: int) -> np.ndarray:
    """One rendered page, (3, size, size) float32 normalized as the package's detector input."""
    from PIL import Image, ImageDraw, ImageFont

    shade = int(rng.integers(200, 256))
    page = Image.new("RGB", (size, size), (shade, shade - int(rng.integers(0, 20)), shade - int(rng.integers(0, 30))))
    draw = ImageDraw.Draw(page)
    for _ in range(int(rng.integers(6, 16))):
        font = ImageFont.load_default(size=int(rng.integers(14, 56)))
        ink = tuple(int(v) for v in rng.integers(0, 90, size=3))
        line = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 6))))
        xy = (int(rng.integers(0, size * 3 // 4)), int(rng.integers(0, size - 20)))
        draw.text(xy, line, fill=ink, font=font)
    for _ in range(int(rng.integers(0, 4))):  # rules and boxes: edges that are not text
        x0, y0 = (int(v) for v in rng.integers(0, size - 40, size=2))
        x1, y1 = x0 + int(rng.integers(20, size // 2)), y0 + int(rng.integers(2, size // 3))
        draw.rectangle((x0, y0, min(x1, size - 1), min(y1, size - 1)), outline=(90, 90, 90), width=2)
    pixels = np.asarray(page, dtype=np.float32) + rng.normal(0.0, 4.0, (size, size, 3)).astype(np.float32)
    pixels = np.clip(pixels, 0.0, 255.0)
    return ((pixels / 255.0 - 0.5) / 0.5).transpose(2, 0, 1).astype(np.float32)


def pages(count: int, size: int, seed: int) -> np.ndarray:
    """`count` pages, (count, 1, 3, size, size): N samples of the detector's batch-1 input."""
    rng = np.random.default_rng(seed)
    return np.stack([text_page(rng, size)[None] for _ in range(count)])


def runners(onnx_path: Path, calibration: np.ndarray, builds: list[tuple[str, str]], threads: int) -> dict[str, Any]:
    """Each arm as a function from one input to the output map (1, 1, H, W)."""
    import onnxruntime as ort
    import openvino as ov
    import tvm
    from tvm import relax

    from autosearch.networks.check import flatten_outputs
    from autosearch.networks.runtimes import onnx_quantized

    def session(path: Path) -> Callable[[np.ndarray], np.ndarray]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.log_severity_level = threads, 3
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return lambda x: sess.run(None, {"x": x})[0]

    quantized = onnx_quantized(onnx_path, [{"x": c} for c in calibration])
    arms: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "ONNX Runtime (fp32, reference)": session(onnx_path),
        "ONNX Runtime int8": session(quantized),
    }
    core = ov.Core()
    for label, hint in (("OpenVINO f32", "f32"), ("OpenVINO default", None)):
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads}
        if hint:
            config["INFERENCE_PRECISION_HINT"] = hint
        compiled = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
        precision = "bf16" if "bfloat16" in str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower() else "f32"
        arms[f"{label} ({precision})" if not hint else label] = lambda x, c=compiled: np.asarray(c([x])[0])
    for label, lib in builds:
        path = Path(lib) / "model.so" if Path(lib).is_dir() else Path(lib)
        main = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())["main"]

        def call(x: np.ndarray, main: Any = main) -> np.ndarray:
            return flatten_outputs(main(tvm.runtime.tensor(x, tvm.cpu())))[0]

        arms[label] = call
    return arms


def accuracy(arms: dict[str, Any], test: np.ndarray) -> dict[str, dict[str, float]]:
    """Per arm over the held-out images: the largest error relative to the reference's scale, and
    the text masks' mean and smallest intersection over union with the reference's."""
    reference = next(iter(arms))
    refs = [arms[reference](x) for x in test]
    table = {}
    for label, fn in arms.items():
        errs, ious = [], []
        for x, ref in zip(test, refs):
            y = fn(x)
            errs.append(float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-12)))
            a, b = y > MASK_THRESHOLD, ref > MASK_THRESHOLD
            ious.append(float((a & b).sum() / max((a | b).sum(), 1)))
        table[label] = {"relative_err": max(errs), "mask_iou_mean": float(np.mean(ious)), "mask_iou_min": min(ious)}
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for det.onnx, calibration.npy, test.npy")
    ap.add_argument("--size", type=int, default=640, help="page side in pixels (a multiple of 32)")
    ap.add_argument("--calibration-images", type=int, default=16)
    ap.add_argument("--test-images", type=int, default=8)
    ap.add_argument("--build", action="append", default=[], help="LABEL=LIB: a tune-model --out folder or a .so")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the accuracy table here")
    args = ap.parse_args(argv)
    if args.size % 32:
        ap.error("--size must be a multiple of 32 (the detector downsamples by 32)")
    builds = [tuple(b.split("=", 1)) for b in args.build]
    if any(len(b) != 2 for b in builds):
        ap.error("--build takes LABEL=LIB")
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_path = fetch(args.out)
    calibration = pages(args.calibration_images, args.size, seed=1)
    test = pages(args.test_images, args.size, seed=2)
    np.save(args.out / "calibration.npy", calibration)
    np.save(args.out / "test.npy", test)
    print(f"{onnx_path}: {len(calibration)} calibration and {len(test)} held-out pages of {args.size}x{args.size}")
    if not builds:
        return 0
    table = accuracy(runners(onnx_path, calibration, builds, args.threads), test)  # type: ignore[arg-type]
    print(f"\n| arm | largest error / scale | text mask IoU, mean (smallest) over {len(test)} pages |")
    print("|---|---|---|")
    for label, row in table.items():
        print(f"| {label} | {row['relative_err']:.2e} | {row['mask_iou_mean']:.4f} ({row['mask_iou_min']:.4f}) |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "accuracy": table}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
