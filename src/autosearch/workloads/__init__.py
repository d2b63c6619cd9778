"""What to optimise: named tensor operators with shapes, and a seeded random program generator.

    >>> from autosearch.workloads import get_workload, resolve_workloads
    >>> wl = get_workload("batch_matmul/1x128x128x128")
    >>> wl.family, wl.key, wl.flops          # ('GMM', '<16 hex digits>', 4194304.0)
    >>> resolve_workloads("C2D,bert,random:3")

Importing this package does not import TVM; the registry is built on first use.
"""

from autosearch.workloads.random_programs import random_program
from autosearch.workloads.registry import Workload, families, get_workload, list_workloads, resolve_workloads

__all__ = [
    "Workload",
    "families",
    "get_workload",
    "list_workloads",
    "random_program",
    "resolve_workloads",
]
