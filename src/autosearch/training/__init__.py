"""Training: datasets from the store, whole-workload splits, losses, metrics, evaluation."""

from autosearch.training.dataset import Dataset, GroupInfo, load_dataset, resolve_db
from autosearch.training.splits import Split, apply_split, split_workloads
from autosearch.training.trainer import EvalResult, evaluate, prediction_throughput, valid_carve_out

__all__ = [
    "Dataset",
    "EvalResult",
    "GroupInfo",
    "Split",
    "apply_split",
    "evaluate",
    "load_dataset",
    "prediction_throughput",
    "resolve_db",
    "split_workloads",
    "valid_carve_out",
]
