"""A tuned network as files a user deploys: the compiled library, its inputs and how it was made.

Layout of an artifact folder (format version 2):
- `model.so`: the Relax executable (`export_library`); the weights are in it, as pre-packed
  constants (`graph.build_network`), so there is no separate parameter file to keep in step;
- `model.json`: format version, the inputs (name, dtype, shape, value range and, for token ids,
  the row count of the table they index), the target, the host CPU it was built on, TVM's
  version, the tuning summary, and since version 2 `library` (the byte size and sha256 of
  `model.so`) and `seal` (a sha256 over `library`, the inputs, the target and the CPU).

Why the checksum and the seal: a truncated or replaced `model.so` crashes the process that maps
it (SIGBUS, not an exception), and an edited input shape would reach the library's kernels. So
`load_artifact` checks the library's size and sha256 before it loads it, the inputs against the
parameter checks compiled into the library itself, and the seal before any call. They catch
damage and edits, not a forger (who could rewrite both files; as with any `.so`, only load
artifacts you built). A version 1 manifest (no checksum) still loads, with a one-line warning
that these checks are skipped: export it again to get them.

The token-id bounds in `model.json` give a friendly message before the call, but they are not
what keeps an id inside its embedding table: the library does that itself (`bounds`: every take
clamps its indices, and on a CPU each token-id input is checked against its table's row count in
the library's own code), so no edit of `model.json` turns an id into an out-of-bounds read; the
library's refusal becomes one line naming the id and the input.

`load_artifact(folder)` gives a `CompiledModel`: call it with numpy arrays, get numpy arrays back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.native_log import dropped
from autosearch.networks.bounds import out_of_range
from autosearch.networks.inputs import InputSpec

__all__ = ["ARTIFACT_VERSION", "CompiledModel", "export_artifact", "load_artifact"]

#: 2: `library` (size, sha256 of model.so) and `seal`; 1: neither (still read, unchecked).
ARTIFACT_VERSION = 2
LIBRARY, MANIFEST = "model.so", "model.json"
#: The manifest fields the seal covers: what decides how the library is called and where it runs.
SEALED = ("format", "version", "library", "inputs", "target", "host_cpu")


def _digest(path: Path) -> tuple[int, str]:
    """Byte size and sha256 of a file, read in chunks (a BERT library holds its weights)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def _seal(manifest: dict[str, Any]) -> str:
    fields = {k: manifest.get(k) for k in SEALED}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _write_whole(out: Path, name: str, write: Any) -> None:
    """`write(tmp_path)` into a new temporary file of ours in `out`, then renamed onto `name`: a
    killed export never leaves a half file under the final name, and the rename replaces whatever
    entry is there (a link included) instead of writing through it."""
    fd, tmp = tempfile.mkstemp(prefix=".autosearch-", suffix=Path(name).suffix, dir=out)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, out / name)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def export_artifact(
    executable: Any, out_dir: str | os.PathLike[str], specs: Sequence[InputSpec], target: Any, summary: dict[str, Any]
) -> Path:
    """Write `model.so` and `model.json` into `out_dir`. The folder is checked again here, at write
    time (`check_out_dir`: not a link, empty or our own artifact, no foreign file under our names),
    so that nothing the run did not write is replaced."""
    import tvm

    from autosearch.backends.tvm.target import canonical_target, host_cpu
    from autosearch.search.tune import check_out_dir

    out = check_out_dir(out_dir)
    library: dict[str, Any] = {}

    def write_library(tmp: str) -> None:
        with dropped():
            executable.export_library(tmp)
        size, sha = _digest(Path(tmp))  # what is renamed into place is what was hashed
        library.update(file=LIBRARY, bytes=size, sha256=sha)

    _write_whole(out, LIBRARY, write_library)
    manifest: dict[str, Any] = {
        "format": "autosearch-network",
        "version": ARTIFACT_VERSION,
        "library": library,
        "inputs": [s.to_json() for s in specs],
        "target": canonical_target(target),
        "host_cpu": host_cpu(),
        "tvm": tvm.__version__,
        "summary": summary,
    }
    manifest = json.loads(json.dumps(manifest, default=str))  # sealed as it will be read back
    manifest["seal"] = _seal(manifest)

    def write_manifest(tmp: str) -> None:
        Path(tmp).write_text(json.dumps(manifest, indent=1))
        os.chmod(tmp, 0o644)

    _write_whole(out, MANIFEST, write_manifest)
    return out


#: The parameter check Relax compiles into `main` for every input (`vm.builtin.check_tensor_info`),
#: as the executable's constant pool prints it: which parameter, its shape and its dtype.
_PARAM_CHECK = re.compile(
    r'ErrorContext\(fn=main, loc=param\[(\d+)\], param=[^,]*, annotation=R\.Tensor\(\(([^()]*)\), dtype="(\w+)"\)'
)


def _library_params(lib: Any, vm: Any) -> tuple[int, dict[int, tuple[tuple[int, ...] | None, str]]] | None:
    """How many inputs the library's `main` takes and, for each it checks, the (shape, dtype) it
    expects (shape None where a dimension is symbolic); None where the executable does not say."""
    from tvm import relax

    try:
        arity = int(vm.module["get_function_arity"]("main"))
        stats = relax.VMExecutable(lib).stats()
    except Exception:  # another TVM's executable: the manifest alone describes the inputs
        return None
    params: dict[int, tuple[tuple[int, ...] | None, str]] = {}
    for m in _PARAM_CHECK.finditer(stats):
        dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
        shape = tuple(int(d) for d in dims) if all(d.isdigit() for d in dims) else None
        params[int(m.group(1))] = (shape, m.group(3))
    return arity, params


def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


class CompiledModel:
    """A loaded artifact: `model(*arrays) -> list of arrays`; `inputs` says what it takes."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        import tvm
        from tvm import relax

        self.folder = folder
        self.manifest = manifest
        self.inputs = [InputSpec.from_json(d) for d in manifest["inputs"]]
        self.target = manifest.get("target", "")
        self.device = tvm.cpu() if '"llvm"' in self.target or self.target.startswith("llvm") else tvm.cuda()
        try:
            with dropped():
                lib = tvm.runtime.load_module(str(folder / LIBRARY))
                self._vm = relax.VirtualMachine(lib, self.device)
        except Exception as exc:
            raise InputError(
                f"cannot load {folder / LIBRARY}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        self._check_inputs(_library_params(lib, self._vm))

    def _check_inputs(self, library: tuple[int, dict[int, tuple[tuple[int, ...] | None, str]]] | None) -> None:
        """The manifest's inputs against what the library's own parameter checks expect: an edited
        shape or dtype is refused here, naming the input, not deep inside the VM."""
        if library is None:
            return
        arity, params = library
        where = self.folder / MANIFEST
        if arity != len(self.inputs):
            raise InputError(f"{where} lists {len(self.inputs)} inputs but {LIBRARY} takes {arity}; export it again")
        for i, spec in enumerate(self.inputs):
            shape, dtype = params.get(i, (None, spec.dtype))
            if shape is not None and shape != spec.shape:
                raise InputError(
                    f"{where}: input {spec.name} has shape {_shape(spec.shape)} but {LIBRARY} takes "
                    f"{_shape(shape)} (the file was edited); export it again"
                )
            if dtype != spec.dtype:
                raise InputError(
                    f"{where}: input {spec.name} has dtype {spec.dtype} but {LIBRARY} takes {dtype} "
                    "(the file was edited); export it again"
                )

    def _args(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        import tvm

        if len(arrays) != len(self.inputs):
            raise InputError(
                f"the model takes {len(self.inputs)} inputs ({', '.join(s.name for s in self.inputs)}), got {len(arrays)}"
            )
        out = []
        for spec, a in zip(self.inputs, arrays):
            a = np.ascontiguousarray(a)
            spec.check_array(a)
            out.append(tvm.runtime.tensor(a, self.device))
        return out

    def _refused(self, exc: Exception, arrays: Sequence[np.ndarray] = ()) -> InputError | None:
        """The library's own check of an argument (its ErrorContext names the parameter), or of a
        token id (`bounds`: every id inside its table), as one line; None for any other error."""
        text = str(exc)
        outside = out_of_range(text)
        if outside is not None:
            name, rows = outside
            names = [s.name for s in self.inputs]
            ids = np.asarray(arrays[names.index(name)]) if name in names and len(arrays) == len(names) else None
            bad = ids[(ids < 0) | (ids >= rows)] if ids is not None else np.empty(0)
            shown = f" {bad.flat[0]}" if bad.size else ""
            return InputError(
                f"token id{shown} out of range [0, {rows}) for input {name} ({LIBRARY} checked it: "
                f"{MANIFEST} allowed it, so its bounds were edited)"
            )
        m = re.search(r"ErrorContext\(fn=main, loc=param\[(\d+)\], param=([^,]*), annotation=([^\n]*?)\)\s", text)
        if m is None:
            return None
        i = int(m.group(1))
        name = self.inputs[i].name if i < len(self.inputs) else m.group(2)
        return InputError(f"input {name}: {LIBRARY} refused it (it takes {m.group(3)})")

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        from autosearch.networks.check import flatten_outputs

        args = self._args(arrays)
        try:
            return flatten_outputs(self._vm["main"](*args))
        except Exception as exc:
            refused = self._refused(exc, arrays)
            if refused is None:
                raise
            raise refused from None

    def latency(self, *arrays: np.ndarray, repeat: int = 10) -> float:
        """Median seconds of one call (TVM's own timer, at least 20 ms a repeat)."""
        args = self._args(arrays)
        ev = self._vm.time_evaluator("main", self.device, number=1, repeat=repeat, min_repeat_ms=20)
        try:
            return float(np.median(ev(*args).results))
        except Exception as exc:
            refused = self._refused(exc, arrays)
            if refused is None:
                raise
            raise refused from None


def _check_library(path: Path, manifest: dict[str, Any], version: int) -> None:
    """Size and sha256 of model.so against the manifest, before the library is mapped (a short
    file would crash the process with SIGBUS instead of raising)."""
    lib = manifest.get("library")
    if not (isinstance(lib, dict) and isinstance(lib.get("bytes"), int) and isinstance(lib.get("sha256"), str)):
        raise InputError(
            f"{path / MANIFEST} (artifact format {version}) has no checksum of {LIBRARY}: it was edited; export it again"
        )
    size = (path / LIBRARY).stat().st_size
    if size != lib["bytes"]:
        raise InputError(
            f"{path / LIBRARY} is {size} bytes, {MANIFEST} says {lib['bytes']}: the library is truncated or was "
            "replaced; export it again"
        )
    if _digest(path / LIBRARY)[1] != lib["sha256"]:
        raise InputError(
            f"{path / LIBRARY} does not match the sha256 in {MANIFEST}: the library is damaged or was replaced; "
            "export it again"
        )


def load_artifact(folder: str | os.PathLike[str]) -> CompiledModel:
    """The artifact `tune-model --out` wrote; refuses (one line) a folder that is not one, one of a
    newer format, one built for another CPU (its code could stop on an unknown instruction), a
    library that does not match its checksum, and a manifest edited since export."""
    from autosearch.backends.tvm.target import host_cpu

    path = Path(folder)
    if not (path / MANIFEST).is_file() or not (path / LIBRARY).is_file():
        raise InputError(f"{path} is not a tune-model artifact (no {MANIFEST} and {LIBRARY} in it)")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path / MANIFEST} is not readable JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "autosearch-network":
        raise InputError(f"{path / MANIFEST} does not describe a tune-model artifact")
    version = manifest.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{path / MANIFEST}: artifact format version must be an integer, got {version!r}")
    if version > ARTIFACT_VERSION:
        raise InputError(f"{path} has artifact format {version}; this autosearch reads up to {ARTIFACT_VERSION}")
    built_on = manifest.get("host_cpu")
    if "llvm" in str(manifest.get("target", "")) and built_on and built_on != host_cpu():
        raise InputError(f"{path} was built for CPU {built_on}, this machine is {host_cpu()}: tune or build it here")
    if version >= 2:
        _check_library(path, manifest, version)
    model = CompiledModel(path, manifest)  # checks the inputs against the library's own
    if version >= 2 and manifest.get("seal") != _seal(manifest):
        raise InputError(
            f"{path / MANIFEST} was edited since export: its inputs (shapes, dtypes, value ranges, index bounds), "
            f"target or CPU no longer match its seal; export it again"
        )
    if version < 2:  # loaded, as it always was, but not silently unchecked
        warnings.warn(
            f"{path / MANIFEST} (artifact format {version}) carries no checksum of {LIBRARY} nor seal: a damaged "
            "library or an edited manifest is not detected; export it again",
            stacklevel=2,
        )
    return model
