"""The metric groups (overlap, distance, MSI, roughness, contours, lesions) and instance matching.

Each group registers its metrics with :mod:`segmetrics.registry`; they compute on masks and surfaces
from :mod:`segmetrics.spatial`.
"""
