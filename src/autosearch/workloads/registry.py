"""The workload registry: named tensor operators with fixed shapes, built fresh as TIR on demand.

A `Workload` is a name, a family, JSON-serialisable shape parameters and a private zero-argument
builder that returns a `PrimFunc`. Nothing is compiled or cached except the structural-hash key
(and the FLOP estimate), so a `Workload` is cheap to hold and safe to pickle (builders are
`functools.partial`s of module-level functions).

Contents, built lazily on first use (importing this module does not import TVM):

- the 53 MetaSchedule benchmark operators of `te_workload.CONFIGS` (family = the CONFIGS key:
  C1D, C2D, C3D, GMM, GRP, DIL, DEP, T2D, CAP, NRM, SFM, CBR, TBG, C2D_WIN_NHWC);
- the operator shapes of ResNet-50, MobileNet-V2 and BERT-base (families `resnet50`,
  `mobilenetv2`, `bert`; names are prefixed by the family, see `network_shapes`);
- random programs `random/<seed>` (family `random`, see `random_programs`), made on request and
  never listed.

Names spell every shape parameter, e.g. ``conv2d_nhwc/1x56x56x64/k3s1p1/64`` (input NHWC /
kernel, stride, padding / output channels; ``/g4`` grouped, ``/d2`` dilated) or
``batch_matmul/1x128x128x128`` (B x N x M x K: X is BxNxK, Y is BxKxM).

Two workloads with different names may share a key when their programs are structurally equal
(e.g. ``resnet50/conv2d_nhwc/1x56x56x64/k1s1p0/64`` and ``conv2d_nhwc/1x56x56x64/k1s1p0/64``):
the key identifies the program, the name the place it came from.
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Sequence

from autosearch.errors import WorkloadError
from autosearch.workloads.base import RANDOM_FAMILY, Workload
from autosearch.workloads.lowp import split_precision, with_precision

__all__ = [
    "Workload",
    "families",
    "get_workload",
    "list_workloads",
    "resolve_workloads",
]

# -- the registry ------------------------------------------------------------------------------

_LOCK = threading.Lock()
_REGISTRY: dict[str, Workload] | None = None


def _registry() -> dict[str, Workload]:
    global _REGISTRY
    if _REGISTRY is None:
        with _LOCK:
            if _REGISTRY is None:
                from autosearch.workloads.network_shapes import benchmark_workloads, network_workloads

                reg: dict[str, Workload] = {}
                for wl in [*benchmark_workloads(), *network_workloads()]:
                    if wl.name in reg:  # a bug in the tables, never a user error
                        raise RuntimeError(f"duplicate workload name {wl.name!r}")
                    reg[wl.name] = wl
                _REGISTRY = reg
    return _REGISTRY


def list_workloads() -> list[Workload]:
    """Every registered workload (benchmark operators, then networks), random programs excluded."""
    return list(_registry().values())


def families() -> dict[str, list[Workload]]:
    """Registered workloads grouped by family, in registration order."""
    out: dict[str, list[Workload]] = {}
    for wl in _registry().values():
        out.setdefault(wl.family, []).append(wl)
    return out


_RANDOM_NAME = re.compile(r"^random/(\d+)$", re.IGNORECASE)
_RANDOM_COUNT = re.compile(r"^random:(.*)$", re.IGNORECASE)


def _closest(word: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    close = difflib.get_close_matches(word, candidates, n=n, cutoff=0.0)
    if len(close) < n:  # get_close_matches compares case-sensitively: try lower case too
        lowered = {c.lower(): c for c in candidates}
        for c in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.0):
            if lowered[c] not in close:
                close.append(lowered[c])
    return close[:n]


def _unknown(kind: str, word: str, candidates: Sequence[str]) -> WorkloadError:
    close = _closest(word, candidates)
    hint = f"; closest: {', '.join(close)}" if close else ""
    return WorkloadError(f"unknown {kind} '{word}'{hint}")


def get_workload(name: str) -> Workload:
    """The workload called `name` (exact, else case-insensitive), ``random/<seed>``, or a dense
    one's low-precision counterpart (``<name>@bf16``, ``<name>@int8``)."""
    if not isinstance(name, str):
        raise WorkloadError(f"workload name must be a string, got {type(name).__name__}")
    name = name.strip()
    base, precision = split_precision(name)
    if precision is not None:
        return with_precision(get_workload(base), precision)
    reg = _registry()
    if name in reg:
        return reg[name]
    m = _RANDOM_NAME.match(name)
    if m:
        from autosearch.workloads.random_programs import random_program

        return random_program(int(m.group(1)))
    lowered = [wl for n, wl in reg.items() if n.lower() == name.lower()]
    if len(lowered) == 1:
        return lowered[0]
    raise _unknown("workload", name, list(reg))


def _random_items(arg: str, item: str) -> list[Workload]:
    from autosearch.workloads.random_programs import random_program

    arg = arg.strip()
    if not arg.isdigit() or int(arg) < 1:
        raise WorkloadError(
            f"bad workload item '{item}': expected random:N with N a positive integer (or random/SEED for one program)"
        )
    return [random_program(seed) for seed in range(int(arg))]


def resolve_workloads(spec: str | Sequence[str]) -> list[Workload]:
    """Workloads named by `spec`, deduplicated by name, in order of first mention.

    `spec` is a comma-separated string or a sequence of such strings. Each item is a workload
    name, a family name (case-insensitive; expands to all its members), ``random:N`` (random
    programs with seeds 0..N-1) or ``random/SEED`` (one random program).
    """
    if isinstance(spec, str):
        raw = [spec]
    elif isinstance(spec, Sequence):
        raw = list(spec)
    else:
        raise WorkloadError(f"workload spec must be a string or a list of strings, got {type(spec).__name__}")
    items: list[str] = []
    for part in raw:
        if not isinstance(part, str):
            raise WorkloadError(f"workload spec items must be strings, got {type(part).__name__}")
        items.extend(s.strip() for s in part.split(",") if s.strip())
    if not items:
        raise WorkloadError("no workloads given: expected names, families or random:N, comma-separated")

    reg = _registry()
    fams = families()
    fam_by_lower = {f.lower(): f for f in fams}
    out: dict[str, Workload] = {}
    for item in items:
        m = _RANDOM_COUNT.match(item)
        if m:
            found = _random_items(m.group(1), item)
        elif item.lower() in fam_by_lower:
            found = fams[fam_by_lower[item.lower()]]
        elif item.lower() == RANDOM_FAMILY:
            raise WorkloadError("family 'random' is unbounded: use random:N or random/SEED")
        else:
            try:
                found = [get_workload(item)]
            except WorkloadError:
                raise _unknown("workload or family", item, [*fams, *reg]) from None
        for wl in found:
            out.setdefault(wl.name, wl)
    return list(out.values())
