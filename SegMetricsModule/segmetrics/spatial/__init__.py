"""Grids and surfaces: :class:`LabelImage` and its geometry checks (``geometry``), storage-order
canonicalisation (``orientation``), surfaces and contours in mm (``mesh``), the compiled kernels
(``_kernels``) and the thread pool they run on (``_threads``).

Lowest layer above :mod:`segmetrics.registry`: it imports nothing else of the package.
"""
