"""The package's version: one source, pyproject.toml, read back from the installed package's metadata."""

import importlib.metadata as _metadata

try:
    __version__ = _metadata.version("saga-worker")
except _metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
