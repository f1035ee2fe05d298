"""The package version, in one place (read by pyproject.toml and the provenance block)."""
__version__ = "0.2.0"
