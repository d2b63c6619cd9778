"""MetaSchedule JSONDatabase round trip through TVM's own reader and writer."""

from __future__ import annotations

import pytest

from autosearch.errors import InputError
from autosearch.features.per_store import EXTRACTOR, featurize_trace
from autosearch.store import Store
from autosearch.store.metaschedule_json import export_json_database, import_json_database


def test_export_then_import_is_identical(collected_db, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    wf, rf = tmp_path / "database_workload.json", tmp_path / "database_tuning_record.json"
    with Store(collected_db, readonly=True) as src:
        out = export_json_database(src, wf, rf)
        original = sorted((m.workload_key, m.schedule_hash, m.status, m.median) for m in src.measurements())
        feats = {(f.workload_key, f.measurement_id): f.features for f in src.iter_features(EXTRACTOR)}
    assert out.records == len(original) and out.workloads == 2
    # TVM itself reads what we wrote.
    assert len(ms.database.JSONDatabase(path_workload=str(wf), path_tuning_record=str(rf))) == out.records
    with Store(tmp_path / "back.db") as dst:
        got = import_json_database(dst, wf, rf, featurize=featurize_trace, extractor=EXTRACTOR)
        assert got.records == out.records
        back = sorted((m.workload_key, m.schedule_hash, m.status, m.median) for m in dst.measurements())
        assert back == original
        refeat = sorted(f.features.tobytes() for f in dst.iter_features(EXTRACTOR))
    ok_feats = sorted(v.tobytes() for v in feats.values())
    assert set(ok_feats) <= set(refeat) or set(refeat) <= set(ok_feats)


def test_broken_line_names_file_and_line_and_writes_nothing(collected_db, tmp_path):
    wf, rf = tmp_path / "w.json", tmp_path / "r.json"
    with Store(collected_db, readonly=True) as src:
        export_json_database(src, wf, rf)
    lines = rf.read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    rf.write_text("\n".join(lines) + "\n")
    with Store(tmp_path / "t.db") as dst:
        with pytest.raises(InputError, match=r"r\.json:3: broken JSON line"):
            import_json_database(dst, wf, rf, featurize=featurize_trace, extractor=EXTRACTOR)
        assert list(dst.measurements()) == []


def test_export_refuses_to_overwrite(collected_db, tmp_path):
    wf, rf = tmp_path / "w.json", tmp_path / "r.json"
    wf.write_text("keep me\n")
    with Store(collected_db, readonly=True) as src, pytest.raises(InputError, match="refusing to overwrite"):
        export_json_database(src, wf, rf)
    assert wf.read_text() == "keep me\n"
