"""Reading inputs: every file format and in-memory array becomes a checked :class:`LabelImage`.

Imports only :mod:`segmetrics.spatial` and :mod:`segmetrics.registry` below it.
"""
