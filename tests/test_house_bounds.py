"""Token ids kept inside their embedding table by the compiled library itself (issue 69, defect 3):
no edit of `model.json` can make `autosearch run` read outside the table, and a manifest without
its checksum (format 1) loads with a one-line warning, not silently.

Before (15354e2, and a265f5b for a format 1 manifest): the library's `take` read unchecked, so a
raised `index_high` in a manifest rewritten as format 1 let an id past the table segfault `run`
(exit 139). One real artifact (`tune-model --trials 0`, conftest's `token_artifact`) is built once
per run, shared with test_house_artifact.py, and copied per test that changes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TOKEN_INPUT, TOKEN_NET, fresh_process, run_cli


def _lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("note: ")]


def _unsealed_with_bounds(art: Path, low: int, high: int, index_high: int | None) -> None:
    """model.json rewritten as format 1 (no checksum, no seal) with the ids' bounds widened (or
    the index bound removed): every check the loader makes against the manifest passes."""
    manifest = json.loads((art / "model.json").read_text())
    manifest["version"] = 1
    manifest.pop("library", None)
    manifest.pop("seal", None)
    manifest["inputs"][0].update(low=low, high=high, index_high=index_high)
    (art / "model.json").write_text(json.dumps(manifest, indent=1))


# Before: exit 139 (SIGSEGV) for 10**8, the read far outside the 50-row table.
@pytest.mark.parametrize(
    ("value", "index_high"),
    [(10**8, 10**9), pytest.param(50, 10**9, marks=pytest.mark.slow), (-3, None)],  # 50: the first row past
)
def test_run_refuses_an_id_past_the_table_in_the_library_even_when_the_manifest_allows_it(
    token_art: Path, tmp_path: Path, value: int, index_high: int | None
) -> None:
    _unsealed_with_bounds(token_art, low=-(10**9), high=10**9, index_high=index_high)
    ids = np.arange(24, dtype=np.int64).reshape(2, 12)
    ids[1, 5] = value
    np.save(tmp_path / "ids.npy", ids)
    proc = fresh_process("run", str(token_art), "--input", f"ids={tmp_path / 'ids.npy'}")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])  # never a signal
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]
    lines = _lines(proc)
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and len(lines) == 2 and lines[0].startswith("warning: "), proc.stderr
    assert f"token id {value} out of range [0, 50) for input ids" in errors[0]


def test_ids_inside_the_table_still_run_with_the_same_outputs(token_artifact: Path) -> None:
    """The check and the clamp change nothing for ids inside the table: PyTorch's outputs."""
    import torch

    from autosearch.networks.artifact import load_artifact

    namespace: dict[str, object] = {}
    exec(TOKEN_NET, namespace)  # the test's own model source
    model = namespace["make_tokens"]().eval()  # type: ignore[operator]
    ids = np.array([[0, 49, 7, 3] * 3, [49] * 12], dtype=np.int64)
    out = load_artifact(token_artifact)(ids)[0]  # read only: the shared artifact itself
    with torch.no_grad():
        expected = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_the_import_clamps_every_computed_take_and_adds_no_task(token_net: Path) -> None:
    """Every take reads its row through a clamp into [0, 49], the check is compiled under its own
    name and is no tuning task (MetaSchedule does not see it)."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.bounds import CHECK_PREFIX
    from autosearch.networks.graph import import_network, load_source
    from autosearch.networks.inputs import example_arrays, parse_inputs

    specs = parse_inputs([TOKEN_INPUT])
    source = load_source(f"{token_net}:make_tokens")
    graph = import_network(f"{token_net}:make_tokens", source, specs, example_arrays(specs), host_target(1))
    takes = [f.script() for gv, f in graph.mod.functions_items() if "take" in gv.name_hint]
    assert takes and all("T.min(T.max(T.int64(0)" in t and "T.int64(49))" in t for t in takes)
    symbols = [str(f.attrs["global_symbol"]) for _, f in graph.mod.functions_items() if "global_symbol" in f.attrs]
    assert f"{CHECK_PREFIX}_0" in symbols
    assert graph.tasks and not any(CHECK_PREFIX in t.task_name for t in graph.tasks)
    assert graph.index_bounds == {"ids": 50}


@pytest.mark.slow  # a second artifact build and a fresh process: ~20 s; the clamp itself is checked above
def test_a_take_of_computed_indices_is_clamped_by_the_library(token_net: Path, tmp_path: Path) -> None:
    """`emb(ids + 1)`: the ids have no recorded bound (they are not the take's indices as they
    are), so neither the manifest nor the check stops 49 + 1; the clamp reads the last row."""
    import autosearch.networks.tune as nt

    out = tmp_path / "shifted"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nt, "torch_latency_isolated", lambda *a, **k: None)
        proc = run_cli(
            "tune-model", f"{token_net}:make_shifted", "--input", "ids:int64:2,12:0..49", "--trials", "0",
            "--db", str(tmp_path / "s.db"), "--out", str(out),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = (
        "import sys, numpy as np\n"
        "from autosearch.networks.artifact import load_artifact\n"
        "m = load_artifact(sys.argv[1])\n"
        "out = m(np.full((2, 12), 10**8, np.int64))[0]\n"  # far past the table
        "last = m(np.full((2, 12), 48, np.int64))[0]\n"  # reads row 49, the last
        "assert np.array_equal(out, last), 'not clamped to the last row'\n"
    )  # fmt: skip
    run = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])


def test_a_format_1_manifest_loads_with_one_warning_and_a_format_2_one_without(token_art: Path) -> None:
    r = run_cli("run", str(token_art), "--repeats", "1")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr[-2000:]
    _unsealed_with_bounds(token_art, low=0, high=50, index_high=50)
    r = run_cli("run", str(token_art), "--repeats", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    lines = _lines(r)
    assert len(lines) == 1 and lines[0].startswith("warning: "), r.stderr
    assert "artifact format 1" in lines[0] and "no checksum of model.so" in lines[0]


@pytest.mark.parametrize(("shape", "dtype"), [((7,), "int32"), ((2, 3, 4), "int64")])
def test_the_check_kernel_copies_ids_of_any_rank_and_stops_at_one_outside(shape: tuple[int, ...], dtype: str) -> None:
    import tvm

    from autosearch.networks.bounds import _check_kernel, out_of_range

    message = "token id out of range [0, 5) for input x"
    lib = tvm.compile(_check_kernel("check", shape, dtype, 5, message), target="llvm")
    ids = (np.arange(np.prod(shape)) % 5).astype(dtype).reshape(shape)
    out = tvm.runtime.tensor(np.zeros(shape, dtype))
    lib["check"](tvm.runtime.tensor(ids), out)
    assert np.array_equal(out.numpy(), ids)
    ids.flat[-1] = 5
    with pytest.raises(Exception) as exc:
        lib["check"](tvm.runtime.tensor(ids), out)
    assert out_of_range(str(exc.value)) == ("x", 5)
