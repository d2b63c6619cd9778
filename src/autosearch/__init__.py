"""autosearch: learned cost models for tensor-program auto-scheduling."""

from autosearch.errors import AutosearchError

__version__ = "0.1.0"

__all__ = ["AutosearchError", "__version__"]
