"""Device descriptors (measured with TVM-built kernels, cached in the store) and Nsight Compute import."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.features import device as fd
from autosearch.store.db import Store

DATA = Path(__file__).parent / "data"
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 mcpu names")


@x86_only
def test_isa_level_and_simd_width_follow_mcpu() -> None:
    from autosearch.backends.tvm.device import isa_info
    from autosearch.backends.tvm.target import parse_target

    got = {m: isa_info(parse_target({"kind": "llvm", "mcpu": m})) for m in ("x86-64", "haswell", "skylake-avx512")}
    assert (got["x86-64"]["isa_level"], got["x86-64"]["simd_bits"], got["x86-64"]["fma"]) == (1, 128, 0)
    assert (got["haswell"]["isa_level"], got["haswell"]["simd_bits"], got["haswell"]["fma"]) == (3, 256, 1)
    assert (got["skylake-avx512"]["isa_level"], got["skylake-avx512"]["simd_bits"]) == (4, 512)


def test_cache_sizes_from_sysfs(tmp_path: Path) -> None:
    from autosearch.backends.tvm.device import cpu_caches

    for i, (level, kind, size) in enumerate(
        [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "96M")]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    assert cpu_caches(str(tmp_path)) == {"l1d_bytes": 48 << 10, "l2_bytes": 2 << 20, "l3_bytes": 96 << 20}
    assert cpu_caches(str(tmp_path / "missing")) == {"l1d_bytes": 0, "l2_bytes": 0, "l3_bytes": 0}


def test_profile_is_measured_once_and_cached(tmp_path: Path) -> None:
    """A real triad + FMA kernel for a 1-core host target; the second call reads the store."""
    from autosearch.backends.tvm.target import canonical_target, device_fingerprint, host_target

    tgt = host_target(num_cores=1)
    with Store(tmp_path / "s.db") as store:
        first = fd.device_descriptor(store, tgt)
        assert first["cores"] == 1 and first["mem_bandwidth_gbs"] > 0.1 and first["peak_gflops"] > 0.1
        assert first["simd_bits"] >= 128 and first["l1d_bytes"] >= 0
        assert store.device(device_fingerprint(tgt), canonical_target(tgt)) == first
        again = fd.device_descriptor(store, tgt)
    assert again == first  # the cached copy: same measurement time, nothing re-measured
    vec = fd.descriptor_vector(first)
    assert vec.shape == (fd.DEVICE_WIDTH,) and vec.dtype == np.float32 and np.isfinite(vec).all()
    assert vec[[n for n, _ in fd.DEVICE_FIELDS].index("cores")] == pytest.approx(1.0)


def test_cuda_descriptor_without_a_gpu() -> None:
    import tvm

    from autosearch.backends.tvm.device import profile_target
    from autosearch.backends.tvm.target import parse_target

    if tvm.cuda(0).exist:
        pytest.skip("a GPU is here: its descriptor is measured (the next test)")
    desc = profile_target(parse_target("cuda-h200"))
    assert desc["kind"] == "cuda" and desc["warp_size"] == 32 and desc["shared_mem_per_block"] == 49152
    assert "mem_bandwidth_gbs" in desc and "peak_gflops" not in desc  # nothing measured on the CPU
    vec = fd.descriptor_vector(desc)
    assert vec[0] == 1.0 and vec[[n for n, _ in fd.DEVICE_FIELDS].index("warp_size")] == 1.0


def test_old_store_opened_read_only_has_no_devices(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(DATA / "tiny_tvm.db", db)  # written before the devices table existed
    with Store(db, readonly=True) as ro:
        assert ro.device("x", "y") is None and ro.devices() == []
    with Store(db) as rw:  # opening for writing adds the table
        rw.put_device("fp", '{"kind":"llvm"}', {"cores": 2})
        rw.put_device("fp", '{"kind":"llvm"}', {"cores": 4})  # replaces
        assert rw.device("fp", '{"kind":"llvm"}') == {"cores": 4}
        assert [d["descriptor"] for d in rw.devices()] == [{"cores": 4}]
        assert fd.target_descriptors(rw, ['{"kind":"llvm"}', "other"]) == {'{"kind":"llvm"}': {"cores": 4}}


def test_with_device_appends_the_group_vector() -> None:
    from autosearch.training.dataset import Dataset

    mats = [np.ones((n, 3), np.float32) for n in (2, 1, 3)]
    ds = Dataset.from_groups([("a", "t1", mats[:2], [1.0, 2.0]), ("b", "t2", mats[2:], [1.0])])
    out = fd.with_device(ds, {"t1": {"cores": 1}, "t2": {"cores": 3}})
    assert out.rows.shape == (6, 3 + fd.DEVICE_WIDTH) and out.n_candidates == 3
    cores = 3 + [n for n, _ in fd.DEVICE_FIELDS].index("cores")
    assert out.rows[:3, cores].tolist() == [1.0, 1.0, 1.0] and out.rows[3:, cores].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(InputError, match="no device descriptor"):
        fd.with_device(ds, {"t1": {}})
    rows = fd.append_device([np.zeros((2, 3), np.float32)], fd.descriptor_vector({"cores": 1}))
    assert rows[0].shape == (2, 3 + fd.DEVICE_WIDTH)


def test_ncu_raw_csv_is_parsed_with_units() -> None:
    k = fd.parse_ncu_csv(DATA / "ncu_raw_small.csv")
    assert set(k) == {"autosearch_m2_kernel", "main_7b3cd070d396bcba_kernel", "vector_add_kernel"}
    m = k["autosearch_m2_kernel"]  # two launches: averaged
    assert m["gpu__time_duration.sum"] == pytest.approx(15_000.0)  # us -> ns
    assert m["dram__bytes_read.sum"] == pytest.approx(2.1e6) and m["dram__bytes_write.sum"] == pytest.approx(512e3)
    assert m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 16384  # thousands separators
    assert m["launch__shared_mem_per_block_static"] == pytest.approx(16380.0)  # Kbyte/block


def test_ncu_details_csv_and_bad_files(tmp_path: Path) -> None:
    f = tmp_path / "details.csv"
    f.write_text(
        '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","as_m5_kernel","Memory","dram__bytes_read.sum","Kbyte","4.00"\n'
        '"0","as_m5_kernel","Launch","launch__grid_size","","1,024"\n'
    )
    assert fd.parse_ncu_csv(f) == {"as_m5_kernel": {"dram__bytes_read.sum": 4000.0, "launch__grid_size": 1024.0}}
    bad = tmp_path / "bad.csv"
    bad.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(InputError, match="Kernel Name"):
        fd.parse_ncu_csv(bad)
    with pytest.raises(InputError, match="cannot read"):
        fd.parse_ncu_csv(tmp_path / "missing.csv")


def test_import_ncu_attaches_by_kernel_name(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    shutil.copy(DATA / "tiny_tvm.db", db)
    with Store(db) as store:
        res = fd.import_ncu_csv(store, DATA / "ncu_raw_small.csv")
        feats = {fr.measurement_id: fr.features for fr in store.iter_features(fd.NCU_EXTRACTOR)}
    assert res["kernels"] == 3 and res["attached"] == 2 and res["unmatched"] == ["vector_add_kernel"]
    assert set(feats) == {2}  # autosearch_m2 and the schedule-hash prefix of record 2 are the same record
    assert feats[2].shape == (1, len(fd.NCU_METRICS)) and np.isfinite(feats[2]).all()


def test_cli_target_profile_and_import_ncu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from autosearch.cli import main

    db = tmp_path / "t.db"
    shutil.copy(DATA / "tiny_tvm.db", db)
    main(["target", "--profile", "--json", "--db", str(db), "--target", '{"kind":"llvm","num-cores":1}'])
    info = json.loads(capsys.readouterr().out)
    assert info["descriptor"]["cores"] == 1 and info["descriptor"]["peak_gflops"] > 0
    main(["db", "import-ncu", str(DATA / "ncu_raw_small.csv"), "--db", str(db)])
    assert "attached metrics of 2 of 3 kernels" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["db", "import-ncu", str(tmp_path / "nope.csv"), "--db", str(db)])
    assert exc.value.code == 2


def test_cuda_measuring_kernels_build_for_a_cuda_target() -> None:
    """The GPU bandwidth and FLOP/s kernels are real CUDA code: they build here (run only on a GPU)."""
    import tvm

    from autosearch.backends.tvm import device as dev
    from autosearch.backends.tvm.target import parse_target

    target = parse_target("cuda-h100")
    for fn in (dev._cuda_triad_func(1 << 12), dev._cuda_fma_func(4, 8, 16)):
        rt = tvm.compile(fn, target=target)
        src = "\n".join(m.inspect_source() for m in rt.mod.imports)
        assert "threadIdx.x" in src and "blockIdx.x" in src


def test_cuda_descriptor_measured_on_a_gpu() -> None:
    import tvm

    from autosearch.backends.tvm.device import profile_target
    from autosearch.backends.tvm.target import parse_target

    if not tvm.cuda(0).exist:
        pytest.skip("no GPU here")
    desc = profile_target(parse_target("cuda-h100"))
    assert desc["from_device"] == 1 and desc["sm_count"] > 0
    assert desc["mem_bandwidth_gbs"] > 100 and desc["peak_gflops"] > 1000  # any CUDA GPU of the last decade
