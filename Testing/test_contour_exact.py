"""Exact contour distances (:mod:`segmetrics.metrics.contours`) against independent truth.

Truth: closed forms (concentric squares and cuboids, rotated or not) and an independent
high-precision computation (mpmath, 20 digits) on small polygons: along each source edge, the
squared distance to each target segment is evaluated point by point (clamped projection); the edge
is cut at every change of a segment's nearest part and every crossing of two segments' distances
(roots of their quadratics, each fitted through three exact points), and on each cut piece the
distance is integrated by tanh-sinh quadrature, its sub-level sets solved, its maximum taken at
the ends.
"""
import itertools
import math

import numpy as np
import pytest

from segmetrics.metrics.contours import DistanceProfile, boundary_segments, distance_profile

try:
    import mpmath
except ImportError:  # the high-precision test skips; the closed forms run without it
    mpmath = None

TOLERANCE_MM = 1e-6


# ---------------------------------------------------------------- independent truth (mpmath)


def _segments(rings):
    return [(tuple(map(mpmath.mpf, a)), tuple(map(mpmath.mpf, b))) for ring in rings
            for a, b in zip(ring, np.roll(ring, -1, axis=0)) if tuple(a) != tuple(b)]


def _squared_distance(point, segment):
    (ax, ay), (bx, by) = segment
    wx, wy = bx - ax, by - ay
    s = min(max(((point[0] - ax) * wx + (point[1] - ay) * wy) / (wx * wx + wy * wy), 0), 1)
    return (point[0] - ax - s * wx) ** 2 + (point[1] - ay - s * wy) ** 2


def _fit(f, low, high):
    """``(a, b, c, t1)`` of the quadratic ``f(t) = a (t - t1)² + b (t - t1) + c`` through three points."""
    t1, h = (low + high) / 2, (high - low) / 2
    f0, f1, f2 = f(low), f(t1), f(high)
    return (f0 - 2 * f1 + f2) / (2 * h * h), (f2 - f0) / (2 * h), f1, t1


def _quadratic_roots(quadratic, low, high):
    """Roots in (low, high) of a quadratic of :func:`_fit`."""
    a, b, c, t1 = quadratic
    small = max(abs(a), abs(b), abs(c), mpmath.mpf(1)) * mpmath.mpf(10) ** -15
    if abs(a) < small:
        roots = [] if abs(b) < small else [-c / b]
    else:
        disc = b * b - 4 * a * c
        q = -(b + (1 if b >= 0 else -1) * mpmath.sqrt(disc)) / 2 if disc >= 0 else 0  # no cancellation
        roots = [] if disc < 0 else [q / a] + ([c / q] if q != 0 else [])
    return sorted(t1 + r for r in roots if low < t1 + r < high)


class Truth:
    """The distance from the source rings' boundary to the target rings' (no cancelled edges)."""

    def __init__(self, source_rings, target_rings):
        mpmath.mp.dps = 20
        self.pieces = []  # (edge length, squared distance of tau, tau low, tau high)
        targets = _segments(target_rings)
        for p, q in _segments(source_rings):
            length = mpmath.sqrt((q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2)

            def point(tau, p=p, q=q):
                return p[0] + tau * (q[0] - p[0]), p[1] + tau * (q[1] - p[1])

            functions = [lambda tau, s=s, point=point: _squared_distance(point(tau), s) for s in targets]
            cuts = {mpmath.mpf(0), mpmath.mpf(1)}
            for (ax, ay), (bx, by) in targets:  # where the projection passes a segment's end
                wx, wy = bx - ax, by - ay
                slope = ((q[0] - p[0]) * wx + (q[1] - p[1]) * wy) / (wx * wx + wy * wy)
                start = ((p[0] - ax) * wx + (p[1] - ay) * wy) / (wx * wx + wy * wy)
                if slope != 0:
                    cuts.update(t for t in (-start / slope, (1 - start) / slope) if 0 < t < 1)
            cuts = sorted(cuts)
            crossings = set()
            for low, high in zip(cuts[:-1], cuts[1:]):
                fits = [_fit(f, low, high) for f in functions]  # the fit of a difference is the difference of fits
                for i in range(len(functions)):
                    for j in range(i + 1, len(functions)):
                        difference = (*(x - y for x, y in zip(fits[i][:3], fits[j][:3])), fits[i][3])
                        crossings.update(_quadratic_roots(difference, low, high))
            cuts = sorted(set(cuts) | crossings)
            for low, high in zip(cuts[:-1], cuts[1:]):
                if high - low > mpmath.mpf(10) ** -30:  # one function is the lowest on the whole piece
                    middle = (low + high) / 2
                    lowest = min(functions, key=lambda f: f(middle))
                    self.pieces.append((length, lowest, low, high, _fit(lowest, low, high)))

    @property
    def length(self):
        return sum(length * (high - low) for length, _, low, high, _ in self.pieces)

    def maximum(self):
        return max(mpmath.sqrt(f(t)) for _, f, low, high, _ in self.pieces for t in (low, high))  # convex pieces

    def mean(self):
        return sum(length * mpmath.quad(lambda t: mpmath.sqrt(f(t)), [low, high])
                   for length, f, low, high, _ in self.pieces) / self.length

    def length_within(self, distance):
        """On each piece the squared distance is one convex quadratic: its sub-level set is an interval."""
        total = 0
        for length, f, low, high, quadratic in self.pieces:
            a, b, c, t1 = quadratic
            below = _quadratic_roots((a, b, c - distance ** 2, t1), low, high)
            for start, end in zip([low, *below], [*below, high]):
                middle = (start + end) / 2 - t1
                if a * middle ** 2 + b * middle + c <= distance ** 2:
                    total += length * (end - start)
        return total

    def percentile(self, percent):
        wanted, low, high = mpmath.mpf(percent) / 100 * self.length, mpmath.mpf(0), self.maximum()
        for _ in range(26):  # to 1.5e-8 of the largest distance
            middle = (low + high) / 2
            low, high = (low, middle) if self.length_within(middle) >= wanted else (middle, high)
        return high


# ---------------------------------------------------------------- shapes


def square(half, centre=(0.0, 0.0), angle=0.0):
    corners = np.array([[-half, -half], [half, -half], [half, half], [-half, half]])
    return rotate(corners, angle) + centre


def polygon(radius, vertices, centre=(0.0, 0.0), angle=0.0):
    turns = angle + np.linspace(0, 2 * np.pi, vertices, endpoint=False)
    return np.column_stack([radius * np.cos(turns), radius * np.sin(turns)]) + centre


def rotate(points, angle):
    c, s = math.cos(angle), math.sin(angle)
    return np.asarray(points, float) @ np.array([[c, s], [-s, c]])


CASES = {
    "square_vs_12gon": ([square(5.0)], [polygon(5.5, 12, angle=0.1)]),
    "rotated_squares": ([square(4.0, angle=0.3)], [square(4.5, centre=(0.7, -0.2), angle=0.9)]),
    "triangle_vs_pentagon": ([np.array([[0, 0], [9, 1], [3, 7.5]])], [polygon(4.0, 5, centre=(4, 3), angle=0.2)]),
    "two_contours_vs_one": ([square(2.0, (-3, 0)), square(1.5, (3, 0.5), 0.4)], [polygon(5.0, 12, angle=0.05)]),
    "hole": ([square(6.0), polygon(2.0, 7, centre=(0.5, 0.3))], [square(5.0, angle=0.2), square(2.5, (1, 0))]),
    "crossing_contours": ([square(3.0)], [square(3.0, (1.0, 1.5), 0.5)]),
    # three sides shared (two of them oblique), drawn the other way round by the target
    "shared_sides": ([np.array([[0, 0], [6, 0], [6, 4], [3, 7], [0, 4]], float)],
                     [np.array([[0, 4], [3, 7], [6, 4], [6, 0], [2.5, 1.0]], float)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_distances_within_1e6_mm_of_high_precision(name):
    pytest.importorskip("mpmath")
    first, second = CASES[name]
    for source, target in ((first, second), (second, first)):
        profile = distance_profile(boundary_segments(source), boundary_segments(target))
        truth = Truth(source, target)
        assert profile.length == pytest.approx(float(truth.length), abs=TOLERANCE_MM)
        assert profile.maximum() == pytest.approx(float(truth.maximum()), abs=TOLERANCE_MM)
        assert profile.mean() == pytest.approx(float(truth.mean()), abs=TOLERANCE_MM)
        for percent in (50, 95):
            assert profile.percentile(percent) == pytest.approx(float(truth.percentile(percent)), abs=TOLERANCE_MM)
        for tolerance in (0.3, 1.0):
            assert profile.length_beyond(tolerance) == pytest.approx(
                float(truth.length - truth.length_within(tolerance)), abs=TOLERANCE_MM)


# ---------------------------------------------------------------- closed forms


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_a_percentile_reached_exactly_is_its_smallest_distance_in_any_piece_order(order):
    """Pieces at constant distances 1 mm (0.1 + 0.7 mm long) and 2 mm (0.3 + 0.5 mm): exactly half the
    length lies within 1 mm, so the median is 1 mm, whatever order the pieces come in (their
    lengths summed in another order round to just below or above half the total length)."""
    lengths, distances = np.array([0.1, 0.7, 0.3, 0.5])[list(order)], np.array([1.0, 1.0, 2.0, 2.0])[list(order)]
    ends = np.cumsum(lengths)
    flat = np.zeros(len(order))
    profile = DistanceProfile(np.zeros(len(order), int), ends - lengths, ends, flat, flat, distances ** 2)
    assert profile.percentile(50) == 1.0


def test_a_percentile_within_the_coinciding_length_is_0_exactly():
    """A 10 mm square in a 10 × 12 mm rectangle sharing three of its sides: 30 of the square's 40 mm and
    of the rectangle's 44 mm lie at distance 0, so their median and 60th percentile are 0 exactly (not
    a denormal after halving the bracket a thousand times); the square's 95th percentile is on its
    fourth side, 2 mm (distance min(2, x, 10 - x) along it)."""
    square = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0]])
    taller = square * [1.0, 1.2]
    for source, target in ((square, taller), (taller, square)):
        profile = distance_profile(boundary_segments([source]), boundary_segments([target]))
        assert profile.percentile(50) == 0.0 and profile.percentile(60) == 0.0
        assert profile.percentile(95) > 0
    assert distance_profile(boundary_segments([square]), boundary_segments([taller])).percentile(95) == pytest.approx(2.0)


@pytest.mark.parametrize("ring", [square(2.0, (0.3, 0.1), angle=0.25), polygon(3.0, 7, angle=0.4),
                                  np.array([[0.1, 0.2], [2.3, 0.9], [1.4, 3.1], [-0.7, 1.6]])])
def test_a_contour_is_at_distance_0_exactly_from_itself(ring):
    """Oblique edges too: their distance to themselves was a hyperbola of curvature ~1e-32 (largest
    distance 4e-16 mm, none of the length within 0 mm); every edge that is also a segment of the other
    contour (in either direction) is now at 0 exactly, so identical contours give 0 for every statistic."""
    segments = boundary_segments([ring])
    profile = distance_profile(segments, segments[::-1, ::-1])
    assert profile.maximum() == 0.0 and profile.mean() == 0.0 and profile.percentile(95) == 0.0
    assert profile.length_within(0.0) == profile.length == pytest.approx(np.hypot(*(segments[:, 1] - segments[:, 0]).T).sum())


def concentric_squares(side, margin):
    """Closed forms of a square of ``side`` inside one ``margin`` wider on every side: from the inner
    one the distance is ``margin`` everywhere; along each outer side (length ``side + 2 margin``) it is
    ``sqrt(margin² + max(0, |x| - side / 2)²)``. Returns (largest, mean, percentile function) outwards."""
    outer_side = side + 2 * margin
    mean = (side * margin + margin ** 2 * (math.sqrt(2) + math.asinh(1))) / outer_side

    def percentile(percent):
        share = percent / 100 * outer_side - side  # length beyond the flat part, both ends of a side
        return margin if share <= 0 else math.hypot(margin, share / 2)

    return margin * math.sqrt(2), mean, percentile


@pytest.mark.parametrize("angle", [0.0, 0.3, math.pi / 4])
def test_concentric_squares_rotated_match_their_closed_form(angle):
    side, margin = 10.0, 1.0
    inner, outer = [square(side / 2, (2.0, -1.0), angle)], [square(side / 2 + margin, (2.0, -1.0), angle)]
    largest, mean, percentile = concentric_squares(side, margin)
    inwards = distance_profile(boundary_segments(inner), boundary_segments(outer))
    outwards = distance_profile(boundary_segments(outer), boundary_segments(inner))
    for percent in (10, 50, 95, 100):
        assert inwards.percentile(percent) == pytest.approx(margin, abs=TOLERANCE_MM)
        assert outwards.percentile(percent) == pytest.approx(percentile(percent), abs=TOLERANCE_MM)
    assert inwards.mean() == pytest.approx(margin, abs=TOLERANCE_MM)
    assert outwards.mean() == pytest.approx(mean, abs=TOLERANCE_MM)
    assert outwards.maximum() == pytest.approx(largest, abs=TOLERANCE_MM)
    # APL: the outer contour's corners farther than the tolerance, 8 stretches per plane
    tolerance = 1.2
    assert outwards.length_beyond(tolerance) == pytest.approx(8 * (margin - math.sqrt(tolerance ** 2 - margin ** 2)),
                                                              abs=TOLERANCE_MM)


def test_a_keyhole_contour_is_its_outline_and_hole():
    """A keyhole walks in to the hole and back along one channel: the channel is not boundary, so the
    distances are those of the outline with a separate hole ring; a ring given twice is no boundary,
    an out-and-back spur leaves none."""
    outline, hole = square(10.0), square(3.0)[::-1]
    keyhole = np.array([[-10, -10], [10, -10], [10, 10], [-10, 10], [-10, 0], [-3, 0], [-3, 3], [3, 3], [3, -3],
                        [-3, -3], [-3, 0], [-10, 0]], float)
    separate = boundary_segments([outline, hole])
    assert _length(boundary_segments([keyhole])) == pytest.approx(_length(separate)) == pytest.approx(80 + 24)
    other = [polygon(6.0, 9, angle=0.2)]
    for source, target in ((boundary_segments([keyhole]), boundary_segments(other)),
                           (boundary_segments(other), boundary_segments([keyhole]))):
        expected = (distance_profile(separate, target) if len(source) > 9 else distance_profile(source, separate))
        profile = distance_profile(source, target)
        assert profile.maximum() == pytest.approx(expected.maximum(), abs=1e-12)
        assert profile.mean() == pytest.approx(expected.mean(), abs=1e-12)
    assert len(boundary_segments([outline, outline[::-1]])) == 0
    spur = np.array([[0, 0], [4, 0], [4, 4], [4, 6], [4, 4], [0, 4]], float)  # out to (4, 6) and back
    assert _length(boundary_segments([spur])) == pytest.approx(16.0)


def _length(segments):
    return float(np.hypot(*(segments[:, 1] - segments[:, 0]).T).sum())
