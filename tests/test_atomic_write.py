"""`tune`'s result files are written through a temporary file renamed into place
(`autosearch.atomic_write`): a symbolic link planted at a file's name while the run goes on is
replaced, never written through, and no temporary file is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from autosearch.atomic_write import SCRATCH_PREFIX, write_text_atomic
from autosearch.search.breakdown import TimeBreakdown
from autosearch.search.results import TuneResult, save_result


def _plant(out: Path, name: str, outside: Path) -> None:
    outside.write_text("the user's own file\n")
    (out / name).symlink_to(outside)


def test_a_link_planted_at_the_name_is_replaced_not_followed(tmp_path: Path) -> None:
    out, outside = tmp_path / "out", tmp_path / "elsewhere.txt"
    out.mkdir()
    _plant(out, "summary.json", outside)
    write_text_atomic(out / "summary.json", '{"a": 1}\n')
    assert outside.read_text() == "the user's own file\n"  # the link's target is untouched
    assert not (out / "summary.json").is_symlink() and json.loads((out / "summary.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # no temporary file left


def test_the_file_gets_a_new_files_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "f.json", "{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "f.json").stat().st_mode & 0o777 == 0o644  # as Path.write_text gives, not 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(tmp_path / "f.json", "\udcff")  # a lone surrogate: not UTF-8
    assert (tmp_path / "f.json").read_text() == "old\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(SCRATCH_PREFIX)]


def test_save_result_replaces_links_planted_in_the_out_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("summary.json", "history.json", "breakdown.json"):
        _plant(out, name, tmp_path / f"user-{name}")
    result = TuneResult(workload="w", workload_key="k", family="f", model="random", target="llvm", seed=0, trials=3)
    save_result(result, None, out, TimeBreakdown())
    for name in ("summary.json", "history.json", "breakdown.json"):
        assert (tmp_path / f"user-{name}").read_text() == "the user's own file\n", name
        assert not (out / name).is_symlink() and json.loads((out / name).read_text()), name
    assert json.loads((out / "summary.json").read_text())["trials_measured"] == 3
