"""A tuned network as files a user deploys: the compiled library, its inputs and how it was made.

Layout of an artifact folder (format version 1):
- `model.so`: the Relax executable (`export_library`); the weights are in it, as pre-packed
  constants (`graph.build_network`), so there is no separate parameter file to keep in step;
- `model.json`: format version, the inputs (name, dtype, shape), the target, the host CPU it was
  built on, TVM's version and the tuning summary.

`load_artifact(folder)` gives a `CompiledModel`: call it with numpy arrays, get numpy arrays back.
Loading runs the library's native code, so only load artifacts you built (as with any `.so`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.native_log import dropped
from autosearch.networks.inputs import InputSpec

__all__ = ["ARTIFACT_VERSION", "CompiledModel", "export_artifact", "load_artifact"]

ARTIFACT_VERSION = 1
LIBRARY, MANIFEST = "model.so", "model.json"


def export_artifact(
    executable: Any, out_dir: str | os.PathLike[str], specs: Sequence[InputSpec], target: Any, summary: dict[str, Any]
) -> Path:
    """Write `model.so` and `model.json` into `out_dir` (each written whole, then renamed: a killed
    export never leaves a half file under the final name)."""
    import tvm

    from autosearch.backends.tvm.target import canonical_target, host_cpu

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out)
    os.close(fd)
    try:
        with dropped():
            executable.export_library(tmp)
        os.replace(tmp, out / LIBRARY)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    manifest = {
        "format": "autosearch-network",
        "version": ARTIFACT_VERSION,
        "inputs": [s.to_json() for s in specs],
        "target": canonical_target(target),
        "host_cpu": host_cpu(),
        "tvm": tvm.__version__,
        "summary": summary,
    }
    tmp_json = out / (MANIFEST + ".tmp")
    tmp_json.write_text(json.dumps(manifest, indent=1, default=str))
    os.replace(tmp_json, out / MANIFEST)
    return out


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

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        from autosearch.networks.check import flatten_outputs

        return flatten_outputs(self._vm["main"](*self._args(arrays)))

    def latency(self, *arrays: np.ndarray, repeat: int = 10) -> float:
        """Median seconds of one call (TVM's own timer, at least 20 ms a repeat)."""
        ev = self._vm.time_evaluator("main", self.device, number=1, repeat=repeat, min_repeat_ms=20)
        return float(np.median(ev(*self._args(arrays)).results))


def load_artifact(folder: str | os.PathLike[str]) -> CompiledModel:
    """The artifact `tune-model --out` wrote; refuses (one line) a folder that is not one, one of a
    newer format, or one built for another CPU (its code could stop on an unknown instruction)."""
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
    if int(manifest.get("version", 0)) > ARTIFACT_VERSION:
        raise InputError(
            f"{path} has artifact format {manifest.get('version')}; this autosearch reads up to {ARTIFACT_VERSION}"
        )
    built_on = manifest.get("host_cpu")
    if "llvm" in str(manifest.get("target", "")) and built_on and built_on != host_cpu():
        raise InputError(f"{path} was built for CPU {built_on}, this machine is {host_cpu()}: tune or build it here")
    return CompiledModel(path, manifest)
