"""The package version: one place, read by ``gymlab.__version__``, ``gymlab --version`` and the build."""

__version__ = "0.1.0"
