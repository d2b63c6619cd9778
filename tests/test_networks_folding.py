"""`networks.folding`: constant calls computed in NumPy give the module TVM's `FoldConstant` gives."""

from __future__ import annotations

import time

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from autosearch.backends.tvm.target import host_target  # noqa: E402
from autosearch.networks.folding import fold_in_numpy  # noqa: E402


def _module() -> tuple[object, dict[str, np.ndarray]]:
    """A BatchNorm's inference decomposition on constants (scalar epsilon, 1/sqrt, expand_dims),
    blocked weight layouts (one padded), a transpose + reshape, squeeze, concat, an integer sum and
    one call NumPy is not asked to fold (`exp`), all feeding a graph with a real input."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 24, 3, 3)).astype("float32")
    var = rng.random(24).astype("float32") + 0.5
    ids = rng.integers(0, 100, (4,)).astype("int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 24, 8, 8), "float32"))
    blocked = lambda o, i, h, k: (o // 16, i // 8, h, k, i % 8, o % 16)  # noqa: E731
    with bb.function("main", [x]):
        with bb.dataflow():
            eps = relax.prim_value(tvm.tirx.FloatImm("float32", 1e-5))
            s = bb.emit(relax.op.sqrt(bb.emit(relax.op.add(relax.const(var), eps))))
            scale = bb.emit(relax.op.expand_dims(relax.op.divide(relax.const(np.float32(1.0)), s), [1, 2]))
            shift = bb.emit(relax.op.expand_dims(relax.op.rsqrt(relax.const(var)), [-1, -2]))
            y = bb.emit(relax.op.add(relax.op.multiply(x, scale), relax.op.negative(shift)))
            wt = bb.emit(relax.op.layout_transform(relax.const(w), blocked))
            padded = bb.emit(relax.op.layout_transform(relax.const(w[:, :20]), blocked, pad_value=0.0))
            moved = bb.emit(relax.op.reshape(relax.op.permute_dims(relax.const(w), [1, 0, 3, 2]), (24, 32, 9)))
            sq = bb.emit(relax.op.squeeze(relax.const(var.reshape(1, 24)), [0]))
            cat = bb.emit(relax.op.concat([relax.const(var), relax.op.exp(relax.const(var))], axis=0))
            total = bb.emit(relax.op.add(relax.const(ids), relax.const(np.int64(7))))
            out = bb.emit_output(relax.Tuple([y, wt, padded, moved, sq, cat, total]))
        bb.emit_func_output(out)
    return bb.get(), {"w": w, "var": var, "ids": ids}


def _constants(mod: object) -> list[np.ndarray]:
    """Every tensor constant bound in `main`, in binding order."""
    values = []
    for block in mod["main"].body.blocks:  # type: ignore[index]
        for binding in block.bindings:
            value = getattr(binding.value, "value", None)
            if hasattr(value, "numpy"):
                values.append(value.numpy())
    return values


def test_numpy_folding_gives_the_module_and_values_tvms_fold_constant_gives() -> None:
    """The folded module then `FoldConstant` equals `FoldConstant` alone, structurally (constants'
    bytes included), and the folded weights are the blocked layout by hand: padding included."""
    mod, data = _module()
    ours = relax.transform.FoldConstant()(fold_in_numpy(mod))
    theirs = relax.transform.FoldConstant()(mod)
    tvm.ir.assert_structural_equal(ours, theirs)

    w = data["w"]
    expected = w.reshape(2, 16, 3, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    padded = np.zeros((32, 24, 3, 3), "float32")
    padded[:, :20] = w[:, :20]
    folded = _constants(fold_in_numpy(mod))
    assert any(c.shape == expected.shape and np.array_equal(c, expected) for c in folded)
    pad_blocked = padded.reshape(2, 16, 3, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    assert any(c.shape == pad_blocked.shape and np.array_equal(c, pad_blocked) for c in folded)


def test_numpy_folding_leaves_calls_it_does_not_know_and_calls_on_the_input() -> None:
    """`exp` of a constant stays a call (TVM's to fold), as does every call on the input `x`."""
    mod, _ = _module()
    text = fold_in_numpy(mod)["main"].script()
    assert "R.exp(" in text
    assert "R.multiply(x," in text
    assert "R.layout_transform" not in text and "R.sqrt" not in text


def test_a_folded_scalar_stays_a_scalar() -> None:
    """A scalar broadcast to a scalar, then given an axis and broadcast (BEiT's relative-position
    index is built so): folded, the scalar kept its shape `()`. It became `(1,)` once, the next
    axis made it `(1, 1)`, and the import failed in TVM's `broadcast_to` (an internal error)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((17,), "int64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            scalar = bb.emit(relax.op.broadcast_to(relax.const(51, "int64"), relax.ShapeExpr([])))
            row = bb.emit(relax.op.broadcast_to(relax.op.expand_dims(scalar, [0]), relax.ShapeExpr([17])))
            out = bb.emit_output(relax.op.add(x, row))
        bb.emit_func_output(out)
    folded = _constants(fold_in_numpy(bb.get()))
    assert [c.shape for c in folded] == [(), (1,), (17,)] and (folded[-1] == 51).all()


def test_a_densenet_block_imports_without_compiling_a_kernel_per_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two DenseNet layers (pre-activation BatchNorm + ReLU before each 1x1 and 3x3 convolution,
    concatenated): with NumPy folding the graph passes take a fraction of TVM's kernel-per-constant
    folding, and compute the same module."""
    torch = pytest.importorskip("torch")
    from autosearch.networks import folding
    from autosearch.networks.graph import _from_torch, _graph_passes

    class Layer(torch.nn.Module):
        def __init__(self, cin: int) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.BatchNorm2d(cin),
                torch.nn.ReLU(),
                torch.nn.Conv2d(cin, 64, 1, bias=False),
                torch.nn.BatchNorm2d(64),
                torch.nn.ReLU(),
                torch.nn.Conv2d(64, 16, 3, padding=1, bias=False),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, self.body(x)], 1)

    net = torch.nn.Sequential(*[Layer(32 + 16 * i) for i in range(4)]).eval()
    x = np.random.default_rng(0).random((1, 32, 14, 14), dtype=np.float32)
    mod, params = _from_torch(net, [x], "dense")
    target = host_target()
    numpy_folding = folding.fold_in_numpy
    ours_s, theirs_s = [], []
    with target:
        for _ in range(2):  # alternated, the least of each: one slow moment of the host decides nothing
            monkeypatch.setattr(folding, "fold_in_numpy", numpy_folding)
            start = time.perf_counter()
            ours, _ = _graph_passes(mod, params, fast_math=False, register_bits=512)
            ours_s.append(time.perf_counter() - start)
            monkeypatch.setattr(folding, "fold_in_numpy", lambda m: m)  # TVM's FoldConstant alone, as before
            start = time.perf_counter()
            theirs, _ = _graph_passes(mod, params, fast_math=False, register_bits=512)
            theirs_s.append(time.perf_counter() - start)
    tvm.ir.assert_structural_equal(ours, theirs)
    assert min(ours_s) < 0.5 * min(theirs_s), (ours_s, theirs_s)


def test_a_batch_norm_after_no_convolution_becomes_one_multiply_add_with_the_same_output() -> None:
    """`batch_norms_as_scale_shift`: a pre-activation BatchNorm (before ReLU and a convolution, so
    `FoldBatchnormToConv2D` cannot take it) reaches the graph as `x * scale + shift`, fused with the
    ReLU into one task with no subtract or divide, and the built network matches PyTorch."""
    torch = pytest.importorskip("torch")
    from autosearch.networks.graph import _from_torch, _graph_passes

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 1)).eval()
    with torch.no_grad():  # statistics far from the identity, so a dropped term would show
        bn = net[0]
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2), bn.bias.uniform_(-1, 1)
    x = np.random.default_rng(0).random((1, 8, 4, 4), dtype=np.float32)
    mod, params = _from_torch(net, [x], "bn")
    target = host_target()
    with target:
        prepared, _ = _graph_passes(mod, params, fast_math=False, register_bits=0)
    names = [gv.name_hint for gv, _ in prepared.functions_items()]
    assert any(n.startswith("fused_multiply") and n.endswith("relu1") for n in names), names
    assert not any("subtract" in n or "divide" in n for n in names), names
    vm = relax.VirtualMachine(tvm.compile(prepared, target=target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x))[0].numpy()
    want = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_exporters_zero_attention_bias_and_safe_softmax_zeros_are_dropped_but_a_zero_weight_is_kept() -> None:
    """A torch attention with a mask that masks nothing, built from `arange` as transformers builds
    it (`scaled_dot_product_attention`, which `torch.export` writes as the math kernel: the mask as
    a zero bias, and `_safe_softmax`'s `zeros_like`) and a
    linear layer whose bias is zeros: after `exporter_zeros_dropped` no `add` of the bias built
    from `arange` is left and each `where` branch is a scalar, the linear layer's zero bias is
    still added, and the imported network computes what PyTorch does."""
    torch = pytest.importorskip("torch")
    from autosearch.networks.check import compare_outputs
    from autosearch.networks.folding import exporter_zeros_dropped
    from autosearch.networks.graph import _from_torch, build_network, import_network
    from autosearch.networks.inputs import InputSpec

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            torch.nn.init.zeros_(self.proj.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = x.view(1, 5, 2, 4).transpose(1, 2)
            mask = (torch.arange(5) >= 0)[None, None, :, None].expand(1, 1, 5, 5)
            attention = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
            return self.proj(attention.transpose(1, 2).reshape(1, 5, 8))

    torch.manual_seed(0)
    net = Attention().eval()
    x = np.random.default_rng(0).standard_normal((1, 5, 8)).astype("float32")
    mod, _ = _from_torch(net, [x], "attention")
    before = mod["main"].script()
    after = exporter_zeros_dropped(fold_in_numpy(mod))

    def calls(module: object, op: str) -> list[object]:
        found: list[object] = []
        for block in module["main"].body.blocks:  # type: ignore[index]
            for binding in block.bindings:
                if str(getattr(getattr(binding.value, "op", None), "name", "")) == op:
                    found.append(binding.value)
        return found

    assert "R.arange" in before and len(calls(mod, "relax.add")) > len(calls(after, "relax.add"))
    used = after["main"].script()
    assert "bias" in used and any(
        "bias" in str(a) for c in calls(after, "relax.add") for a in c.args
    )  # the weight kept
    wheres = calls(after, "relax.where")
    assert wheres and all(any(int(np.prod(_shape(a))) == 1 for a in w.args[1:]) for w in wheres)
    graph = import_network("attention", net, [InputSpec("x", "float32", x.shape)], [x], host_target())
    from tvm.s_tir import meta_schedule as ms

    lib = build_network(graph, ms.database.MemoryDatabase(), host_target())
    vm = relax.VirtualMachine(lib, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))[0].numpy()
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).numpy()
    assert compare_outputs([out], [expected]).ok


def _shape(expr: object) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape.values)  # type: ignore[attr-defined]


def test_weights_packed_for_tuned_kernels_are_moved_in_numpy_and_the_build_computes_what_foldconstant_gave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two dense layers built with register blocks that pack their weights and biases
    (`RewriteLayout`): `prepacks_in_numpy` replaces each call of a pre-packing function by the
    packed constants, no pre-packing function is left to compile into the library, and the network
    computes bit for bit what it computes with `FoldConstant` packing the weights (and PyTorch's
    result within 1e-4)."""
    import torch
    from tvm.s_tir import meta_schedule as ms

    import autosearch.networks.graph as graph
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.inputs import InputSpec
    from autosearch.networks.register_blocks import candidates
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.tune import _commit

    target = host_target()
    if not register_lanes(target):
        pytest.skip("no SIMD registers known on this CPU")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    x = np.random.default_rng(0).standard_normal((28, 128)).astype("float32")
    g = graph.import_network("net", net, [InputSpec("x", "float32", x.shape)], [x], target)
    db = ms.database.MemoryDatabase()
    for wl in g.workloads:
        blocks = candidates(wl.mod(), target, None)
        if blocks:
            _commit(db, wl, trace_json(blocks[0][0]), 1e-5, target)

    def built() -> tuple[np.ndarray, int]:
        ex = graph.build_network(g, db, target)
        out = relax.VirtualMachine(ex.jit(), tvm.cpu())["main"](tvm.runtime.tensor(x))
        source = "".join(m.inspect_source("ll") for m in ex.mod._collect_dso_modules() if m.kind == "llvm")
        return (out if hasattr(out, "numpy") else out[0]).numpy(), source.count("_weight_prepack")

    moved, left = built()
    monkeypatch.setattr(graph, "prepacks_in_numpy", lambda mod: mod)  # FoldConstant packs them
    folded, left_by_foldconstant = built()
    assert left == 0 and left_by_foldconstant > 0
    np.testing.assert_array_equal(moved, folded)
    np.testing.assert_allclose(moved, net(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-4)
