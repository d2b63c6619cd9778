"""Cost models behind one interface (`CostModel`): make one by kind, or load a saved directory.

Implementations are imported lazily, so importing `autosearch.models` costs nothing and the
TVM anchors load TVM only when asked for.
"""

from autosearch.models.base import DEFAULT_EXTRACTOR, CostModel, FeatureBatch, TrainReport
from autosearch.models.registry import KINDS, load_model, make_model, model_class

__all__ = [
    "DEFAULT_EXTRACTOR",
    "KINDS",
    "CostModel",
    "FeatureBatch",
    "TrainReport",
    "load_model",
    "make_model",
    "model_class",
]
