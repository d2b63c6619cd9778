"""`autosearch tune-model`: budget split, argument checks, and (slow) a tiny Linear+ReLU end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autosearch.cli import main
from autosearch.errors import InputError
from autosearch.search.network import parse_shapes, split_budget

NET = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))

def make_model():
    torch.manual_seed(0)
    return Net()

def not_a_module():
    return 42
'''


def test_split_budget_gives_every_task_a_round_then_by_cost() -> None:
    assert split_budget(64, 16, [1.0, 1.0, 6.0]) == [16, 16, 32]
    assert sum(split_budget(100, 16, [3.0, 1.0])) == 96
    assert split_budget(16, 16, [1.0, 5.0]) == [0, 16]  # one round: the costliest task gets it
    assert split_budget(32, 16, []) == []


def test_parse_shapes() -> None:
    assert parse_shapes(["1,3,224,224", "4x64"]) == [(1, 3, 224, 224), (4, 64)]
    with pytest.raises(InputError, match="integers"):
        parse_shapes(["1,a"])
    with pytest.raises(InputError, match="positive"):
        parse_shapes(["0,3"])


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:")
    return lines[0]


def test_bad_model_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(NET)
    db = str(tmp_path / "x.db")
    assert "does not exist" in _err(capsys, ["tune-model", str(tmp_path / "nope.py:make_model"), "--input-shape", "4,64", "--db", db])
    assert "not a torch.nn.Module" in _err(capsys, ["tune-model", f"{f}:not_a_module", "--input-shape", "4,64", "--db", db])
    assert "no attribute" in _err(capsys, ["tune-model", f"{f}:missing", "--input-shape", "4,64", "--db", db])


@pytest.mark.slow
def test_tiny_network_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(NET)
    try:
        main(["tune-model", f"{f}:make_model", "--input-shape", "4,64", "--model", "pretrained", "--trials", "16",
              "--trials-per-round", "8", "--population", "16", "--db", str(tmp_path / "n.db"), "--json"])
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{"):])
    assert s["output_matches"] and s["trials_measured"] == 16
    assert s["tuned_latency_s"] > 0 and s["untuned_latency_s"] > 0
