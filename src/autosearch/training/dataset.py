"""Training data read from the store: candidates grouped by (workload, target, device), ranked within.

Why groups: latencies of different programs are not comparable, so labels are normalised inside
each group (`min_latency / latency`, failed = 0) and every metric is computed per group. The rows
of all candidates are kept in one float32 matrix with offsets (no per-candidate Python objects),
so 100k candidates stream from SQLite into a few hundred MB.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.training.batch import DEFAULT_EXTRACTOR, FeatureBatch
from autosearch.training.metrics import labels_from_latency

__all__ = ["Dataset", "GroupInfo", "load_dataset", "resolve_db"]


@dataclass(frozen=True)
class GroupInfo:
    """One (workload, target, device) group; its candidates are `start:stop` of the dataset.

    `device` is the fingerprint of the machine that measured them (empty when not from a store):
    the same target timed on two machines, or with two thread counts, is two groups, because
    their latencies are not comparable.
    """

    workload_key: str
    target: str
    name: str
    family: str
    start: int
    stop: int
    device: str = ""

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass
class Dataset:
    """Candidates with variable-length features, contiguous per group.

    rows: float32 (R, F); offsets: int64 (N+1) row offsets per candidate; latencies: float64 (N),
    inf for failed runs; labels: float64 (N) normalised throughput within the group.
    """

    rows: np.ndarray
    offsets: np.ndarray
    latencies: np.ndarray
    labels: np.ndarray
    groups: list[GroupInfo]
    extractor: tuple[str, str] = DEFAULT_EXTRACTOR
    measurement_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_groups(
        cls,
        groups: Iterable[tuple[str, str, Sequence[np.ndarray], Sequence[float | None]]],
        extractor: tuple[str, str] = DEFAULT_EXTRACTOR,
        names: dict[str, tuple[str, str]] | None = None,
    ) -> Dataset:
        """Build from (workload_key, target, feature matrices, latencies or None) tuples."""
        b = _Builder(extractor, names or {})
        for key, target, mats, lats in groups:
            if len(mats) != len(lats):
                raise InputError(f"group {key}: {len(mats)} feature matrices but {len(lats)} latencies")
            for mat, lat in zip(mats, lats):
                b.add(key, target, -1, lat, np.asarray(mat, dtype=np.float32))
        return b.finish()

    @classmethod
    def empty(cls, n_features: int = 0, extractor: tuple[str, str] = DEFAULT_EXTRACTOR) -> Dataset:
        return cls(
            np.zeros((0, n_features), np.float32),
            np.zeros(1, np.int64),
            np.zeros(0),
            np.zeros(0),
            [],
            extractor,
        )

    @classmethod
    def concat(cls, parts: Sequence[Dataset]) -> Dataset:
        """Every part's groups, in order, as one dataset: training data from several stores.

        Labels stay as each part normalised them, per group; a (workload, target) group present
        in two parts stays two groups (each store measured it on its own, so their latencies are
        not compared). The parts must share the extractor and the feature width.
        """
        parts = [p for p in parts if p.n_candidates]
        if not parts:
            raise InputError("concat needs at least one non-empty dataset")
        first = parts[0]
        for p in parts[1:]:
            if p.extractor != first.extractor or p.n_features != first.n_features:
                raise InputError(
                    f"cannot join datasets of {first.extractor} x {first.n_features} and {p.extractor} x {p.n_features}"
                )
        groups: list[GroupInfo] = []
        offsets = [np.zeros(1, np.int64)]
        n_rows = n_cands = 0
        for p in parts:
            groups += [dataclasses.replace(g, start=g.start + n_cands, stop=g.stop + n_cands) for g in p.groups]
            offsets.append(p.offsets[1:] + n_rows)
            n_rows += p.rows.shape[0]
            n_cands += p.n_candidates
        ids = [
            p.measurement_ids if p.measurement_ids.size == p.n_candidates else np.full(p.n_candidates, -1)
            for p in parts
        ]
        return cls(
            np.concatenate([p.rows for p in parts]),
            np.concatenate(offsets),
            np.concatenate([p.latencies for p in parts]),
            np.concatenate([p.labels for p in parts]),
            groups,
            first.extractor,
            np.concatenate(ids).astype(np.int64),
        )

    # -- shape -------------------------------------------------------------------------------
    @property
    def n_candidates(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    @property
    def n_features(self) -> int:
        return int(self.rows.shape[1])

    def __len__(self) -> int:
        return self.n_candidates

    def __repr__(self) -> str:
        return f"Dataset({self.n_groups} groups, {self.n_candidates} candidates, {self.rows.shape[0]} rows x {self.n_features})"

    # -- access ------------------------------------------------------------------------------
    def batch(self, idx: np.ndarray | None = None) -> FeatureBatch:
        """All candidates (or the given candidate indices) as a FeatureBatch."""
        full = FeatureBatch(self.rows, self.offsets)
        return full if idx is None else full.select(idx)

    def group_batch(self, g: int) -> FeatureBatch:
        """The candidates of group g, without copying."""
        info = self.groups[g]
        o = self.offsets[info.start : info.stop + 1]
        return FeatureBatch(self.rows[o[0] : o[-1]], o - o[0])

    def group_ids(self) -> np.ndarray:
        """Group index of every candidate (int64, length N)."""
        return np.repeat(np.arange(self.n_groups, dtype=np.int64), [g.size for g in self.groups])

    def workload_keys(self) -> list[str]:
        return list(dict.fromkeys(g.workload_key for g in self.groups))

    def subset(self, group_indices: Sequence[int]) -> Dataset:
        """A new dataset holding only these groups (copied), in the given order."""
        b = _Builder(self.extractor, {})
        for gi in group_indices:
            g = self.groups[gi]
            b.names[g.workload_key] = (g.name, g.family)
            for c in range(g.start, g.stop):
                mid = int(self.measurement_ids[c]) if self.measurement_ids.size else -1
                lat = self.latencies[c]
                b.add(
                    g.workload_key,
                    g.target,
                    mid,
                    float(lat) if np.isfinite(lat) else None,
                    self.rows[self.offsets[c] : self.offsets[c + 1]],
                    device=g.device,
                )
        out = b.finish(check=False)
        if out.n_candidates == 0:
            return Dataset.empty(self.n_features, self.extractor)
        return out

    def select_workloads(self, keys_or_names: Iterable[str]) -> Dataset:
        """Groups whose workload key, name or family is in `keys_or_names`."""
        wanted = set(keys_or_names)
        return self.subset([i for i, g in enumerate(self.groups) if wanted & {g.workload_key, g.name, g.family}])


class _Builder:
    """Accumulates candidates (streamed in group order) into one Dataset; drops bad ones with a warning."""

    def __init__(self, extractor: tuple[str, str], names: dict[str, tuple[str, str]]) -> None:
        self.extractor = extractor
        self.names = names
        self.chunks: list[np.ndarray] = []
        self.lens: list[int] = []
        self.lats: list[float] = []
        self.mids: list[int] = []
        self.groups: list[GroupInfo] = []
        self.width: int | None = None
        self.cur: tuple[str, str, str] | None = None
        self.cur_start = 0
        self.n_nonfinite = 0
        self.skipped: list[str] = []

    def add(self, key: str, target: str, mid: int, latency: float | None, mat: np.ndarray, device: str = "") -> None:
        if mat.ndim != 2:
            raise InputError(f"measurement {mid}: features must be a 2-D matrix, got shape {mat.shape}")
        if self.width is None and mat.shape[0]:
            self.width = mat.shape[1]
        if mat.shape[0] and mat.shape[1] != self.width:
            raise InputError(
                f"measurement {mid}: feature width {mat.shape[1]} differs from {self.width} of earlier rows"
            )
        if mat.size and not np.isfinite(mat).all():
            self.n_nonfinite += 1
            return
        if (key, target, device) != self.cur:
            self._close()
            self.cur, self.cur_start = (key, target, device), len(self.lens)
        self.chunks.append(mat)
        self.lens.append(mat.shape[0])
        ok = latency is not None and np.isfinite(latency) and latency > 0
        self.lats.append(float(latency) if ok else np.inf)  # type: ignore[arg-type]
        self.mids.append(mid)

    def _close(self) -> None:
        if self.cur is None:
            return
        key, target, device = self.cur
        start, stop = self.cur_start, len(self.lens)
        name, family = self.names.get(key, (key, ""))
        lats = np.asarray(self.lats[start:stop])
        if stop > start and not np.isfinite(lats).any():
            # A group with no successful run teaches nothing about order: drop it.
            self.skipped.append(name)
            del self.chunks[start:], self.lens[start:], self.lats[start:], self.mids[start:]
        elif stop > start:
            self.groups.append(GroupInfo(key, target, name, family, start, stop, device))
        self.cur = None

    def finish(self, check: bool = True) -> Dataset:
        self._close()
        if self.n_nonfinite:
            warnings.warn(f"skipped {self.n_nonfinite} candidate(s) whose features contain NaN or inf", stacklevel=3)
        if self.skipped:
            shown = ", ".join(self.skipped[:5]) + (" ..." if len(self.skipped) > 5 else "")
            warnings.warn(f"skipped {len(self.skipped)} group(s) where every measurement failed: {shown}", stacklevel=3)
        width = self.width or 0
        if not self.lens:
            if check and self.skipped:
                raise InputError(f"dataset is empty: every measurement of all {len(self.skipped)} group(s) failed")
            if check:
                raise InputError("dataset is empty: no candidates with features (wrong --db, extractor or filters?)")
            return Dataset.empty(width, self.extractor)
        offsets = np.zeros(len(self.lens) + 1, dtype=np.int64)
        np.cumsum(np.asarray(self.lens, dtype=np.int64), out=offsets[1:])
        rows = np.empty((int(offsets[-1]), width), dtype=np.float32)
        pos = 0
        for i, c in enumerate(self.chunks):  # fill in place and free as we go: peak stays ~1x
            rows[pos : pos + c.shape[0]] = c
            pos += c.shape[0]
            self.chunks[i] = None  # type: ignore[call-overload]
        self.chunks = []
        lats = np.asarray(self.lats, dtype=np.float64)
        labels = np.zeros_like(lats)
        for g in self.groups:
            labels[g.start : g.stop] = labels_from_latency(lats[g.start : g.stop])
        return Dataset(rows, offsets, lats, labels, self.groups, self.extractor, np.asarray(self.mids, dtype=np.int64))


def load_dataset(
    db: str | os.PathLike[str],
    extractor: tuple[str, str] = DEFAULT_EXTRACTOR,
    target: str | None = None,
    workloads: Sequence[str] | None = None,
    max_groups: int | None = None,
) -> Dataset:
    """Stream features from the store at `db` into a Dataset.

    `workloads` are keys, names or families; `max_groups` keeps the first N groups (by workload
    id), for quick runs. Failed measurements stored with features get label 0.
    """
    from autosearch.store.db import Store

    with Store(db, readonly=True) as store:
        rows = store.workloads()
        names = {w.key: (w.name, w.family) for w in rows}
        keys = None
        if workloads is not None:
            wanted = set(workloads)
            keys = [w.key for w in rows if wanted & {w.key, w.name, w.family}]
            unknown = wanted - {x for w in rows for x in (w.key, w.name, w.family)}
            if unknown:
                raise InputError(f"unknown workload(s) in {db}: {', '.join(sorted(unknown)[:5])}")
        b = _Builder(tuple(extractor), names)  # type: ignore[arg-type]
        seen: set[tuple[str, str, str]] = set()
        for fr in _iter(store, extractor, target, keys):
            g = (fr.workload_key, fr.target, fr.device)
            if g not in seen:
                if max_groups is not None and len(seen) >= max_groups:
                    break
                seen.add(g)
            median = fr.median if fr.status == "ok" else None
            b.add(fr.workload_key, fr.target, fr.measurement_id, median, fr.features, device=fr.device)
        return b.finish()


def _iter(store: Any, extractor: tuple[str, str], target: str | None, keys: Any) -> Iterator[Any]:
    if keys is not None and not keys:
        return iter(())
    return store.iter_features(extractor=tuple(extractor), target=target, workload_keys=keys)


def resolve_db(path: str | os.PathLike[str]) -> str:
    """The path of a readable store: a `.xz` file is decompressed once into the user's cache.

    Why: the reference dataset is committed compressed; the decompressed copy is reused while the
    archive is unchanged (keyed by its path, size and mtime). The cache is a private folder
    (`$XDG_CACHE_HOME/autosearch`, mode 0700, ours, not a link), never a guessable name in the
    shared temp folder, and the copy is written to a fresh file and renamed into place, under a
    lock: processes started together (several trainings on one store) decompress it once, and
    none replaces a copy another has open (its SQLite WAL would then belong to another file).
    """
    import fcntl
    import hashlib
    import lzma
    import shutil
    import tempfile
    from pathlib import Path

    p = Path(path)
    if p.suffix != ".xz":
        return str(p)
    if not p.is_file():
        raise InputError(f"no database at {p}")
    st = p.stat()
    tag = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cache = _private_cache_dir()
    out = cache / f"{p.stem}-{tag}"
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise InputError(f"{out} is not a regular file: remove it (the .xz cache never follows links)")
    if out.exists():
        return str(out)
    with open(cache / f".{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if out.exists():  # another process decompressed it while this one waited
            return str(out)
        fd, tmp_name = tempfile.mkstemp(prefix=".part-", dir=cache)
        tmp = Path(tmp_name)
        try:
            with lzma.open(p) as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (lzma.LZMAError, EOFError) as exc:
            tmp.unlink(missing_ok=True)
            raise InputError(f"{p} is not a valid .xz archive: {exc}") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        tmp.replace(out)
    return str(out)


def _private_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/autosearch` (default ~/.cache/autosearch), created 0700; refused if it is a
    link or belongs to someone else."""
    from pathlib import Path

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = base / "autosearch"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if d.is_symlink() or not d.is_dir():
        raise InputError(f"{d} must be a directory, not a link: remove it")
    if hasattr(os, "getuid") and d.stat().st_uid != os.getuid():
        raise InputError(f"{d} belongs to another user: set XDG_CACHE_HOME to a folder of yours")
    return d
