"""`networks.row_reductions`: a softmax or a LayerNorm gets loop nests whose row reductions are
split into register-wide partial results, each computing what the task computes; a matmul none."""

from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from autosearch.backends.tvm.target import host_target  # noqa: E402


def _module(kind: str, rows: int, width: int):  # type: ignore[no-untyped-def]
    """A softmax over the last axis of (2, rows, width), or a LayerNorm over the last axis (as
    Relax legalizes `R.nn.layer_norm`: a sum, a mean, a sum of squared differences, the output)."""
    from tvm import relax
    from tvm.script import relax as R

    shape = (2, rows, width)
    if kind == "softmax":

        @tvm.script.ir_module
        class Softmax:
            @R.function
            def main(x: R.Tensor(shape, "float32")) -> R.Tensor(shape, "float32"):
                with R.dataflow():
                    y = R.nn.softmax(x, axis=-1)
                    R.output(y)
                return y

        mod = Softmax
    else:

        @tvm.script.ir_module
        class LayerNorm:
            @R.function
            def main(
                x: R.Tensor(shape, "float32"), g: R.Tensor((width,), "float32"), b: R.Tensor((width,), "float32")
            ) -> R.Tensor(shape, "float32"):
                with R.dataflow():
                    y = R.nn.layer_norm(x, g, b, axes=[-1])
                    R.output(y)
                return y

        mod = LayerNorm
    mod = relax.transform.LegalizeOps()(mod)
    (name,) = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    return tvm.IRModule({"main": mod[name].with_attr("global_symbol", "main")})


def _run(mod, arrays: list[np.ndarray]) -> np.ndarray:  # type: ignore[no-untyped-def]
    lib = tvm.compile(mod, target=host_target()).jit()
    args = [tvm.runtime.tensor(a) for a in arrays]
    out = tvm.runtime.tensor(np.zeros_like(arrays[0]))
    lib["main"](*args, out)
    return out.numpy()


@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
@pytest.mark.parametrize("width", [48, 40])  # three registers of 16 lanes, and a ragged row
def test_row_reductions_get_register_wide_partials_and_compute_the_task(kind: str, width: int) -> None:
    """Four forms (separate or one row loop, each serial and parallel); in each, every reduction
    is split into a partial-result block (`rfactor`) whose innermost axis is one register,
    vectorized where the register divides the row, and so is each element-wise step's; a joined form has one loop at the top; each
    computes what the unscheduled task computes, and its trace replays to a schedule that does
    (`verify.schedule_matches`)."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.row_reductions import row_reduction_forms

    lanes = 16
    mod = _module(kind, 5, width)
    forms = row_reduction_forms(mod, lanes)
    assert len(forms) == 4
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, width)).astype("float32") * 4
    arrays = [x] if kind == "softmax" else [x, rng.random(width, dtype=np.float32), rng.random(width, dtype=np.float32)]
    expected = _run(mod, arrays)
    for k, sch in enumerate(forms):
        blocks = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
        partials = [b for b in blocks if b.endswith("_rf")]
        assert len(partials) == 2, blocks  # the max and the sum; the sum and the squared differences
        for name in partials:
            inner = sch.get(sch.get_loops(sch.get_sblock(name))[-1])
            assert int(inner.extent) == lanes
            assert (int(inner.kind) == 2) == (width % lanes == 0)  # ForKind.VECTORIZED
        steps = [  # the element-wise steps along the rows (the softmax's exp and division), not a row's mean
            b
            for b in blocks
            if all(iv.iter_type == 0 for iv in sch.get(sch.get_sblock(b)).iter_vars)
            and len(sch.get_loops(sch.get_sblock(b))) > 1
        ]
        assert steps, blocks
        for name in steps:  # as vectors too, where whole registers divide the row
            inner = sch.get(sch.get_loops(sch.get_sblock(name))[-1])
            assert (int(inner.kind) == 2) == (width % lanes == 0), name
        body = sch.get(sch.get_sblock("root")).body
        loops_at_top = len(body.seq) if isinstance(body, tvm.tirx.SeqStmt) else 1
        assert (loops_at_top == 1) == (k >= 2), (k, loops_at_top)
        np.testing.assert_allclose(_run(sch.mod, arrays), expected, rtol=1e-5, atol=1e-6)
        assert trace_json(sch)


def test_a_matmul_and_a_short_row_have_no_row_form() -> None:
    """A matmul (alone or with a bias added after it) has no rows of a width: its reduction's rows
    are the output's elements; a row shorter than a register has nothing to split; no registers
    (a GPU): none of them gets a form."""
    from tvm import te

    from autosearch.networks.row_reductions import row_reduction_forms

    a, b = te.placeholder((8, 64), name="A"), te.placeholder((64, 32), name="B")
    r = te.reduce_axis((0, 64), name="k")
    c = te.compute((8, 32), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="matmul")
    matmul = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    bias = te.placeholder((32,), name="bias")
    d = te.compute((8, 32), lambda i, j: c[i, j] + bias[j], name="bias_add")
    with_epilogue = tvm.IRModule({"main": te.create_prim_func([a, b, bias, d])})
    assert row_reduction_forms(matmul, 16) == []
    assert row_reduction_forms(with_epilogue, 16) == []
    assert row_reduction_forms(_module("softmax", 5, 12), 16) == []
    assert row_reduction_forms(_module("softmax", 5, 48), 0) == []


def test_a_row_form_trace_replays_and_is_tokenized() -> None:
    """What the store keeps of a chosen form (its trace, with `RFactor` and `Merge`) replays onto
    the task and computes it, and the learned models' tokenizer reads it (a store with such
    records trains the next prior)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.space import trace_json
    from autosearch.features.trace_tokens import trace_tokens
    from autosearch.networks.row_reductions import row_reduction_forms

    mod = _module("softmax", 5, 40)
    joined = row_reduction_forms(mod, 16)[2]
    text = trace_json(joined)
    assert '"Merge"' in text and '"RFactor"' in text
    replayed = Schedule(mod)
    Trace.apply_json_to_schedule(json.loads(text), replayed)
    x = np.random.default_rng(1).standard_normal((2, 5, 40)).astype("float32")
    np.testing.assert_allclose(_run(replayed.mod, [x]), _run(mod, [x]), rtol=1e-5, atol=1e-6)
    tokens = trace_tokens(text, mod.script())
    assert tokens.shape[0] > 0 and np.isfinite(tokens).all()
