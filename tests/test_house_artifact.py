"""The artifact folder, written and read (issue 69, groups 1-4 and part of 12): `--out` never writes
through a symbolic link nor over a file that is not ours, a failed run leaves no empty folder it
made, and `run` refuses a damaged library or an edited manifest in one line instead of crashing.

Every test of a defect failed on the code before its fix (15354e2); the comment above each says how.
One real artifact (`tune-model --trials 0` of a token-embedding model, conftest's `token_artifact`)
is built once per run, shared with test_house_bounds.py, and copied per test that changes it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosearch.errors import InputError
from conftest import TOKEN_INPUT, error_line, fresh_process, run_cli


def _edit(art: Path, **inputs: Any) -> None:
    """Change fields of model.json's first input, as a user with an editor would."""
    manifest = json.loads((art / "model.json").read_text())
    manifest["inputs"][0].update(inputs)
    (art / "model.json").write_text(json.dumps(manifest, indent=1))


def _as_format_1(art: Path) -> None:
    """The manifest as autosearch wrote it before the checksum (format 1)."""
    manifest = json.loads((art / "model.json").read_text())
    manifest["version"] = 1
    manifest.pop("library", None)
    manifest.pop("seal", None)
    (art / "model.json").write_text(json.dumps(manifest, indent=1))


def _tune_model(net: Path, out: Path, tmp_path: Path, func: str = "make_tokens") -> subprocess.CompletedProcess[str]:
    args = ["tune-model", f"{net}:{func}", "--input", TOKEN_INPUT, "--trials", "0", "--db", str(tmp_path / "t.db")]
    return run_cli(*args, "--out", str(out))


# -- 1. --out: no symbolic link followed, no foreign file overwritten ----------------------------
# Before: check_out_dir took a link to a folder for that folder, and the export wrote model.so and
# model.json into wherever it pointed (exit 0).
def test_tune_model_refuses_an_out_that_is_a_symbolic_link_and_writes_nothing_where_it_points(
    token_net: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    line = error_line(_tune_model(token_net, tmp_path / "link", tmp_path))
    assert "symbolic link" in line and "link" in line
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "t.db").exists()  # refused before the store was opened, let alone tuned


# Before: the export renamed its files over the links (exit 0): the user's links were replaced, and
# the probe and manifest temporary files were written through links of those names.
@pytest.mark.parametrize("name", ["model.json", "model.so"])
def test_tune_model_refuses_an_out_whose_file_is_a_symbolic_link(
    token_net: Path, token_art: Path, tmp_path: Path, name: str
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file")
    (token_art / name).unlink()
    (token_art / name).symlink_to(outside)
    line = error_line(_tune_model(token_net, token_art, tmp_path))
    assert "symbolic link" in line and name in line
    assert (token_art / name).is_symlink() and outside.read_text() == "the user's own file"


# Before: a user's own model.json in the folder was silently replaced by the manifest (exit 0).
def test_tune_model_refuses_a_folder_holding_a_users_own_model_json(token_net: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "model.json").write_text('{"my": "own model description"}')
    line = error_line(_tune_model(token_net, out, tmp_path))
    assert "model.json is not part of an autosearch artifact" in line
    assert (out / "model.json").read_text() == '{"my": "own model description"}'
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]


# Before: any folder was taken, and the artifact written among the user's files (exit 0).
def test_tune_model_refuses_a_non_empty_folder_that_is_no_artifact(token_net: Path, tmp_path: Path) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert "is not empty and holds no autosearch artifact" in error_line(_tune_model(token_net, out, tmp_path))
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# Before: `tune --out LINK` tuned and wrote best.json, summary.json ... where the link pointed, and
# over a user's own best.json.
def test_tune_refuses_a_symbolic_link_out_and_a_foreign_best_json(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    tune = ["tune", "batch_matmul/1x128x128x128", "--model", "random", "--trials", "16", "--db", str(tmp_path / "t.db")]
    assert "symbolic link" in error_line(run_cli(*tune, "--out", str(tmp_path / "link")))
    assert list(elsewhere.iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "best.json").write_text('{"mine": true}')
    assert "best.json is not part of an autosearch artifact" in error_line(run_cli(*tune, "--out", str(mine)))
    assert (mine / "best.json").read_text() == '{"mine": true}'


def test_our_own_artifacts_are_taken_as_out_again(token_art: Path, tmp_path: Path) -> None:
    """A rerun into its own output folder is the normal case: a tune-model artifact, a tune output
    (known by best.json's format, or by summary.json where no schedule was found) and a folder with
    a user's other files beside our artifact are all accepted, and nothing is changed by the check."""
    from autosearch.search.tune import check_out_dir

    (token_art / "README.txt").write_text("my notes")
    before = {p.name: p.read_bytes() for p in token_art.iterdir()}
    assert check_out_dir(token_art) == token_art
    assert {p.name: p.read_bytes() for p in token_art.iterdir()} == before
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "best.json").write_text(json.dumps({"format": "autosearch-best-schedule", "format_version": 1}))
    (tuned / "history.json").write_text("{}")
    check_out_dir(tuned)
    (tuned / "best.json").unlink()
    (tuned / "summary.json").write_text(json.dumps({"workload_key": "k", "trials_measured": 0, "run_id": "r"}))
    check_out_dir(tuned)
    (tuned / "summary.json").unlink()  # history.json alone: nothing vouches for it any more
    with pytest.raises(InputError, match="history.json is not part of an autosearch artifact"):
        check_out_dir(tuned)


def _tiny_executable() -> Any:
    """A real Relax executable of the artifact's input (ids int64 2x12 -> ids + ids), compiled here:
    a library loaded from a file cannot be exported again."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    ids = relax.Var("ids", relax.TensorType((2, 12), "int64"))
    with bb.function("main", [ids]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(ids, ids))
        bb.emit_func_output(out)
    return tvm.compile(bb.get(), target="llvm")


def test_a_network_build_is_compiled_once_and_the_artifact_is_that_library(tmp_path: Path) -> None:
    """On a CPU every VM of a run and the artifact use one shared library (before, each VM's load
    compiled the LLVM module in memory and the export compiled it again); where the library cannot
    be linked the build still runs, compiled in memory."""
    import numpy as np
    import tvm
    from tvm import relax

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.library import JitBuild, LibraryBuild, compile_network

    ids = np.arange(24, dtype=np.int64).reshape(2, 12)

    def runs(build: Any) -> None:
        out = relax.VirtualMachine(build.module, tvm.cpu())["main"](tvm.runtime.tensor(ids))
        np.testing.assert_array_equal(out.numpy(), 2 * ids)

    build = compile_network(_tiny_executable(), host_target())
    assert isinstance(build, LibraryBuild) and build.path.is_file()
    runs(build)
    build.export_library(str(tmp_path / "copy.so"))
    assert (tmp_path / "copy.so").read_bytes() == build.path.read_bytes()
    folder = build.path.parent
    del build
    assert not folder.exists()  # the run's library goes with its build

    class NoLinker:  # an executable whose export fails, as without a C compiler
        def __init__(self, ex: Any) -> None:
            self.ex = ex

        def export_library(self, path: str) -> None:
            raise RuntimeError("Compilation error: g++ not found")

        def jit(self) -> Any:
            return self.ex.jit()

    fallback = compile_network(NoLinker(_tiny_executable()), host_target())
    assert isinstance(fallback, JitBuild)
    runs(fallback)


# Before: export_artifact wrote through a folder link (it checked nothing at write time).
def test_export_checks_the_folder_again_at_write_time(token_art: Path, tmp_path: Path) -> None:
    """Between the check at the start and the export the folder may have changed: the export
    refuses a link or a foreign manifest then too; into its own artifact it writes a loadable one."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.artifact import export_artifact, load_artifact
    from autosearch.networks.inputs import parse_inputs

    executable = _tiny_executable()
    specs = parse_inputs(["ids:int64:2,12"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        export_artifact(executable, tmp_path / "link", specs, host_target(), {})
    assert list(elsewhere.iterdir()) == []
    (elsewhere / "model.json").write_text("{}")
    with pytest.raises(InputError, match="not part of an autosearch artifact"):
        export_artifact(executable, elsewhere, specs, host_target(), {})
    assert (elsewhere / "model.json").read_text() == "{}"
    export_artifact(executable, token_art, specs, host_target(), {})
    assert sorted(p.name for p in token_art.iterdir()) == ["model.json", "model.so"]  # no temporary file left
    ids = np.arange(24, dtype=np.int64).reshape(2, 12)
    np.testing.assert_array_equal(load_artifact(token_art)(ids)[0], 2 * ids)


# -- 12. a failed run leaves no empty --out folder it made ----------------------------------------
# Before: check_out_dir made the folder at the start and a failed run left it there, empty.
def test_a_failed_tune_model_removes_the_empty_out_folders_it_made_and_only_those(
    token_net: Path, tmp_path: Path
) -> None:
    new = tmp_path / "new" / "sub"
    assert "not a torch.nn.Module" in error_line(_tune_model(token_net, new, tmp_path, "not_a_module"))
    assert not (tmp_path / "new").exists()
    there = tmp_path / "there"
    there.mkdir()
    assert "not a torch.nn.Module" in error_line(_tune_model(token_net, there, tmp_path, "not_a_module"))
    assert there.is_dir()  # it was the user's before the run


# -- 2. a damaged library ---------------------------------------------------------------------------
# Before: a model.so cut short (its ELF header intact) crashed `run` with SIGBUS (exit 135, no line).
def test_run_refuses_a_truncated_library_naming_it(token_art: Path) -> None:
    lib = token_art / "model.so"
    size = lib.stat().st_size
    os.truncate(lib, size // 2)
    line = error_line(fresh_process("run", str(token_art)))
    assert f"{lib} is {size // 2} bytes, model.json says {size}: the library is truncated" in line


# Before: a model.so with one byte changed was mapped and run as it was (no checksum to refuse it).
def test_run_refuses_a_library_that_does_not_match_its_sha256(token_art: Path) -> None:
    lib = token_art / "model.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(data)
    line = error_line(run_cli("run", str(token_art)))
    assert f"{lib} does not match the sha256 in model.json" in line
    manifest = json.loads((token_art / "model.json").read_text())
    assert manifest["version"] == 2 and manifest["library"]["bytes"] == len(data)


# -- 3. an index bound raised in model.json --------------------------------------------------------
# Before: model.json's index_high was the only bound on a token id, so raising it let an id past
# the 50-row table reach the library's unchecked `take`: a segmentation fault (exit 139).
def test_run_refuses_a_manifest_whose_index_bound_was_raised(token_art: Path, tmp_path: Path) -> None:
    _edit(token_art, index_high=10**9, high=10**9)
    np.save(tmp_path / "ids.npy", np.full((2, 12), 10**8, np.int64))
    line = error_line(fresh_process("run", str(token_art), "--input", f"ids={tmp_path / 'ids.npy'}"))
    assert "model.json was edited since export" in line and "index bounds" in line


def test_a_manifest_edit_outside_the_sealed_fields_still_loads(token_art: Path) -> None:
    """The seal covers what decides how the library is called; the tuning summary is a record."""
    from autosearch.networks.artifact import load_artifact

    manifest = json.loads((token_art / "model.json").read_text())
    manifest["summary"]["note"] = "a user's remark"
    (token_art / "model.json").write_text(json.dumps(manifest))
    m = load_artifact(token_art)
    with pytest.raises(InputError, match=r"values must lie in \[0, 50\)"):
        m(np.full((2, 12), 50, np.int64))  # the sealed bound, still in force


# -- 4. an input shape edited in model.json -----------------------------------------------------------
# Before: `run` drew inputs of the edited shape and the library's own check failed inside the VM:
# "internal error: RuntimeError: ... match_cast error" (exit 1).
@pytest.mark.parametrize("fmt", [2, 1])
def test_run_names_the_input_and_both_shapes_of_an_edited_input_shape(token_art: Path, fmt: int) -> None:
    """Against the library's own parameter checks, so a format 1 manifest (no seal) is caught too."""
    if fmt == 1:
        _as_format_1(token_art)
    _edit(token_art, shape=[2, 13])
    line = error_line(run_cli("run", str(token_art)))
    assert "input ids has shape 2x13 but model.so takes 2x12" in line
    _edit(token_art, shape=[2, 12], dtype="int32")
    assert "input ids has dtype int32 but model.so takes int64" in error_line(run_cli("run", str(token_art)))


def test_a_format_1_manifest_still_loads_and_a_format_2_one_needs_its_checksum(token_art: Path) -> None:
    """Backward compatible: an artifact exported before the checksum runs, unchecked; a format 2
    manifest that lost its checksum is refused (else deleting it would skip the check)."""
    manifest = json.loads((token_art / "model.json").read_text())
    del manifest["library"]
    (token_art / "model.json").write_text(json.dumps(manifest))
    assert "has no checksum of model.so" in error_line(run_cli("run", str(token_art)))
    _as_format_1(token_art)
    r = run_cli("run", str(token_art), "--json", "--repeat", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["outputs"] == [{"shape": [2, 12, 4], "dtype": "float32"}]


def test_the_librarys_own_argument_check_is_one_line_naming_the_input(token_artifact: Path) -> None:
    """Where the library refuses an argument itself (an executable whose checks the loader could
    not read), its error becomes one line naming the input, not a TVM trace."""
    import tvm

    from autosearch.networks.artifact import load_artifact

    m = load_artifact(token_artifact)  # read only: the shared artifact itself
    with pytest.raises(Exception) as exc:
        m._vm["main"](tvm.runtime.tensor(np.zeros((2, 13), np.int64), m.device))
    refused = m._refused(exc.value)
    assert refused is not None and str(refused).startswith("input ids: model.so refused it")
    assert "\n" not in str(refused) and "(2, 12)" in str(refused)
    assert m._refused(RuntimeError("something else")) is None


def test_a_manifest_version_that_is_not_a_number_is_one_line(token_art: Path) -> None:
    manifest = json.loads((token_art / "model.json").read_text())
    (token_art / "model.json").write_text(json.dumps({**manifest, "version": "two"}))
    assert "must be an integer" in error_line(run_cli("run", str(token_art)))
    assert os.path.getsize(token_art / "model.so") > 0
