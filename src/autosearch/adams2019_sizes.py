"""The sizes of Halide's Adams2019 network and featurization (NetworkSize.h, Featurization.h).

One home for them because two layers must agree on them and neither may import the other: the
`.weights` / `.sample` file formats (backends/halide) and the PyTorch model (models/adams2019).
"""

from __future__ import annotations

__all__ = [
    "BUFFER_SHAPES",
    "CONV1_CHANNELS",
    "HEAD1_CHANNELS",
    "HEAD1_H",
    "HEAD1_W",
    "HEAD2_CHANNELS",
    "HEAD2_W",
    "NUM_FEATURES",
    "NUM_PIPELINE_FEATURES",
    "NUM_SCHEDULE_FEATURES",
]

#: Per stage: 39 schedule floats, then 287 pipeline floats (41 x 7; the first row, 7 type-mask
#: values, is not fed to the net).
NUM_SCHEDULE_FEATURES = 39
NUM_PIPELINE_FEATURES = 287
NUM_FEATURES = NUM_SCHEDULE_FEATURES + NUM_PIPELINE_FEATURES  # 326
HEAD1_CHANNELS, HEAD1_W, HEAD1_H = 8, 40, 7
HEAD2_CHANNELS, HEAD2_W = 24, 39
CONV1_CHANNELS = 32

#: The network's six parameter buffers, in `.weights` file order, with their Halide-order shapes.
BUFFER_SHAPES: dict[str, tuple[int, ...]] = {
    "head1_filter": (HEAD1_CHANNELS, HEAD1_W, HEAD1_H),
    "head1_bias": (HEAD1_CHANNELS,),
    "head2_filter": (HEAD2_CHANNELS, HEAD2_W),
    "head2_bias": (HEAD2_CHANNELS,),
    "conv1_filter": (CONV1_CHANNELS, HEAD1_CHANNELS + HEAD2_CHANNELS),
    "conv1_bias": (CONV1_CHANNELS,),
}
