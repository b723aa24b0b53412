"""The package version, in a module of its own so that any layer can read it without loading
the package root's API (which reaches the checker and the plan importers)."""

__version__ = "0.1.0"
