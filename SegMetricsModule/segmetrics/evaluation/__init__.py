"""Running evaluations: :func:`compare` (pairing, metric groups, statuses), frames, dataset batches,
their workers, aggregates and provenance.

Above every other layer of the package except the applications (``cli``, ``demo``, ``report``, ``mrml``).
"""
