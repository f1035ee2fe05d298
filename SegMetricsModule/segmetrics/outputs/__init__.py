"""Writing results: tables (terminal, CSV, JSON), per-slice tables and offscreen renders.

Imports only the layers below it (registry, spatial, inputs, metrics).
"""
