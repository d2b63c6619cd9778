"""Whole models: import (PyTorch or ONNX) -> graph passes -> tasks -> prior schedules -> tuning
under a budget -> one exported library a user can load and run (`autosearch tune-model`,
`autosearch run`)."""

from autosearch.networks.artifact import CompiledModel, load_artifact
from autosearch.networks.inputs import InputSpec, parse_inputs

__all__ = ["CompiledModel", "InputSpec", "load_artifact", "parse_inputs"]
