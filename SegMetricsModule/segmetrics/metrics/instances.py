"""Instance extraction, IoU matching, COCO-style mask AP and lesion-wise detection scores.

Works for 2-D ``(row, col)`` and 3-D ``(z, y, x)`` arrays alike; instances are sets of pixels or
voxels, so every IoU here is a ratio of voxel counts (no spacing needed, unit-free).

COCO conventions reproduced exactly (pycocotools ``COCOeval``, ``iouType="segm"``, area range
"all", no crowd regions):

- IoU thresholds ``np.linspace(0.5, 0.95, 10)`` and 101 recall points ``np.linspace(0, 1, 101)``.
- Per image and class, detections are taken by descending score; each one takes the still
  unmatched ground-truth instance of its class with the highest IoU >= the threshold (equal IoUs:
  the ground-truth instance listed last wins, as in pycocotools).
- Detections are never truncated (pycocotools' ``maxDets`` is effectively infinite here).
- **Tie order**: equal scores keep their input order, a stable sort: within an image, instances
  in ascending instance index (label value, or connected-component number in raster order);
  across images, the order the images were given. With the default score 1 every tie is
  broken this way.
- A class with no ground-truth instance in any image has AP = NaN (status ``reference_empty``)
  and is left out of the class means, as pycocotools does; its false positives cost nothing.
  A class with ground truth but no detection has AP = 0 (status ``test_empty``).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from ..registry import MetricValue, Status, emptiness_status

#: The ten COCO IoU thresholds 0.50, 0.55, ..., 0.95 (same floats as pycocotools).
IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
#: The 101 COCO recall points 0.00, 0.01, ..., 1.00.
RECALL_POINTS = np.linspace(0.0, 1.0, int(np.round((1.0 - 0.0) / 0.01)) + 1, endpoint=True)


@dataclass
class Instances:
    """The instances of one image.

    Attributes
    ----------
    labels : ndarray of int
        Instance index per pixel/voxel (array-axis order): 0 = none, ``1..n`` = instance.
    ids : ndarray, shape (n,)
        Original id of instance ``i + 1`` (input label value or component number).
    classes : ndarray, shape (n,)
        Class id of each instance.
    scores : ndarray of float, shape (n,)
        Confidence of each instance (1 when none is given).
    """

    labels: np.ndarray
    ids: np.ndarray
    classes: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def areas(self) -> np.ndarray:
        """Pixel/voxel count of each instance, shape (n,)."""
        return np.bincount(self.labels.ravel(), minlength=len(self) + 1)[1:]

    def keep_classes(self, class_ids) -> "Instances":
        """Only the instances whose class is in ``class_ids`` (renumbered, order kept)."""
        keep = np.isin(self.classes, list(class_ids))
        lookup = np.zeros(len(self) + 1, dtype=np.int64)
        lookup[1:][keep] = np.arange(1, keep.sum() + 1)
        return Instances(lookup[self.labels], self.ids[keep], self.classes[keep], self.scores[keep])


def connected_components(label_map, connectivity: int) -> tuple:
    """``(components, count)``: the connected components of the pixels/voxels of each non-zero
    value of ``label_map`` (neighbours of another value are not connected), ``connectivity`` 1
    (faces) to ``ndim`` (corners), numbered ``1..count`` (int32, as :func:`scipy.ndimage.label`;
    0 elsewhere) in raster order of their first pixel (as :func:`skimage.measure.label` numbers
    them in 2-D and for boolean masks)."""
    label_map = np.asarray(label_map)
    if label_map.dtype == bool:
        label_map = label_map.astype(np.uint8)
    elif label_map.size and not (np.issubdtype(label_map.dtype, np.integer) and 0 <= label_map.min() <= label_map.max() <= label_map.size):
        # other values (negative, not integers, or many more than the pixels): each its rank, 0 kept as 0
        codes = np.unique(label_map, return_inverse=True)[1].reshape(label_map.shape)
        label_map = np.where(label_map != 0, codes + 1, 0)
    structure = ndimage.generate_binary_structure(label_map.ndim, connectivity)
    components = np.zeros(label_map.shape, dtype=np.int32)
    boxes = [(value, box) for value, box in enumerate(ndimage.find_objects(label_map), start=1) if box is not None]
    first_pixels, count = [], 0
    for value, box in boxes:  # each value in its bounding box
        mask = label_map[box] == value
        part, found = ndimage.label(mask, structure)
        if len(boxes) > 1:
            first_pixels.append(_first_pixels(box, part, label_map.shape))
        if count:
            np.add(part, count, out=part, where=mask)
        np.copyto(components[box], part, where=mask)
        count += found
    if len(boxes) > 1:  # values one after the other: renumber by first pixel
        number = np.zeros(count + 1, dtype=np.int32)
        number[1 + np.argsort(np.concatenate(first_pixels))] = np.arange(1, count + 1)
        flat = components.reshape(-1)
        foreground = np.flatnonzero(flat)
        flat[foreground] = number[flat[foreground]]
    return components, count


def _first_pixels(box, part, shape):
    """Raster index in an image of ``shape`` of the first pixel of each component (1, 2, ...) of
    ``part``, a :func:`scipy.ndimage.label` output (numbered in raster order) of the image's ``box``:
    raster order within a box is raster order in the image."""
    labelled = np.flatnonzero(part)
    numbers = part.ravel()[labelled]
    first = labelled[numbers > np.maximum.accumulate(np.concatenate([[0], numbers[:-1]]))]
    corner = np.array([s.start for s in box])[:, None]
    return np.ravel_multi_index(np.array(np.unravel_index(first, part.shape)) + corner, shape)


def instances_from_semantic(label_map, connectivity: int | None = None, class_ids=None) -> Instances:
    """Connected components of each class of a semantic label map, as instances.

    Parameters
    ----------
    label_map : ndarray of int
        Class per pixel/voxel (0 = background), 2-D ``(row, col)`` or 3-D ``(z, y, x)``.
    connectivity : int, optional
        Neighbours counted as connected: 1 = sharing a face (4-/6-connectivity) up to ``ndim`` =
        sharing a corner (8-/26-connectivity). Default ``ndim`` (full connectivity).
    class_ids : iterable of int, optional
        Classes to keep; other labels are treated as background. Default: every non-zero label.

    Components are numbered in raster order; ``ids`` are these numbers and scores are 1.
    """
    label_map = np.asarray(label_map)
    if connectivity is not None and (isinstance(connectivity, bool) or not isinstance(connectivity, numbers.Integral)
                                     or not 1 <= connectivity <= label_map.ndim):
        raise ValueError(f"connectivity must be 1 (faces) to {label_map.ndim} (corners) for a {label_map.ndim}-D "
                         f"label map, got {connectivity!r}")
    if class_ids is not None:
        label_map = np.where(np.isin(label_map, list(class_ids)), label_map, 0)
    components, count = connected_components(label_map, label_map.ndim if connectivity is None else connectivity)
    classes = np.zeros(count + 1, dtype=label_map.dtype)
    classes[components.ravel()] = label_map.ravel()
    return Instances(components, np.arange(1, count + 1), classes[1:], np.ones(count))


def instances_from_labels(instance_map, classes=None) -> Instances:
    """Instances from an instance label map: every non-zero id is one instance.

    Parameters
    ----------
    instance_map : ndarray of int
        Instance id per pixel/voxel (0 = none); an id may be spatially disconnected.
    classes : None, dict or ndarray, optional
        Class of each instance: ``None`` puts all in class 1; a dict maps instance id -> class;
        a class label map of the same shape gives each instance the class covering most of it.
    """
    instance_map = np.asarray(instance_map)
    ids, inverse = np.unique(instance_map, return_inverse=True)
    inverse = inverse.reshape(instance_map.shape)
    if ids.size and ids[0] == 0:
        ids = ids[1:]
    else:
        inverse = inverse + 1
    if classes is None:
        instance_classes = np.ones(len(ids), dtype=int)
    elif isinstance(classes, dict):
        missing = [i.item() for i in ids if i.item() not in classes]
        if missing:
            raise ValueError(f"no class given for instance id(s) {missing[:10]}")
        instance_classes = np.array([classes[i.item()] for i in ids], dtype=int)
    else:
        instance_classes = _majority_class(inverse, np.asarray(classes), len(ids))
    return Instances(inverse, ids, instance_classes, np.ones(len(ids)))


def _majority_class(labels: np.ndarray, class_map: np.ndarray, n: int) -> np.ndarray:
    """Most frequent class of ``class_map`` inside each instance ``1..n`` of ``labels``."""
    if class_map.shape != labels.shape:
        raise ValueError(f"class map shape {class_map.shape} differs from instance map shape {labels.shape}")
    inside = labels > 0
    values, class_index = np.unique(class_map[inside], return_inverse=True)
    if not len(values):
        return np.zeros(n, dtype=int)
    counts = np.bincount(labels[inside] * len(values) + class_index, minlength=(n + 1) * len(values))
    return values[counts.reshape(n + 1, len(values))[1:].argmax(axis=1)]


def scores_from_probability(instances: Instances, probability) -> Instances:
    """Instances scored by the mean of a probability (or score) map inside each instance."""
    probability = np.asarray(probability, dtype=float)
    if probability.shape != instances.labels.shape:
        raise ValueError(f"probability map shape {probability.shape} differs from label shape {instances.labels.shape}")
    sums = np.bincount(instances.labels.ravel(), weights=probability.ravel(), minlength=len(instances) + 1)[1:]
    return Instances(instances.labels, instances.ids, instances.classes, sums / instances.areas())


def scores_from_mapping(instances: Instances, scores: dict) -> Instances:
    """Instances scored from ``{instance id: score}`` (ids as in ``instances.ids``); all must be given."""
    keyed = {int(k): float(v) for k, v in scores.items()}
    missing = [i.item() for i in instances.ids if int(i) not in keyed]
    if missing:
        raise ValueError(f"no score given for instance id(s) {missing[:10]}")
    values = np.array([keyed[int(i)] for i in instances.ids], dtype=float)
    return Instances(instances.labels, instances.ids, instances.classes, values)


def instance_ious(ground_truth: Instances, detections: Instances):
    """IoU of every overlapping (detection, ground truth) pair of the same class, sparsely.

    Returns ``(d, g, iou)``: 0-based detection and ground-truth indices and their IoU, for the
    pairs sharing at least one pixel/voxel (all other pairs have IoU 0). Computed from the joint
    labels of the overlap pixels, without any per-pair mask.
    """
    if ground_truth.labels.shape != detections.labels.shape:
        raise ValueError(
            f"ground truth shape {ground_truth.labels.shape} differs from detection shape {detections.labels.shape}"
        )
    gt, dt = ground_truth.labels.ravel(), detections.labels.ravel()
    both = (gt > 0) & (dt > 0)
    keys, intersection = np.unique(dt[both].astype(np.int64) * (len(ground_truth) + 1) + gt[both], return_counts=True)
    d, g = keys // (len(ground_truth) + 1) - 1, keys % (len(ground_truth) + 1) - 1
    same_class = detections.classes[d] == ground_truth.classes[g]
    d, g, intersection = d[same_class], g[same_class], intersection[same_class]
    union = detections.areas()[d] + ground_truth.areas()[g] - intersection
    return d, g, intersection / union


def match_image(ground_truth: Instances, detections: Instances, thresholds=IOU_THRESHOLDS) -> np.ndarray:
    """Greedy COCO matching of one image: which detections are true positives at each threshold.

    Returns a boolean array ``(len(thresholds), n_detections)`` in the detections' own order.
    Detections go by descending score (stable); each takes the unmatched ground-truth instance of
    its class with the highest IoU >= threshold (last one on equal IoU), as pycocotools does.
    """
    return _greedy_match(ground_truth, detections, thresholds)[0]


def _greedy_match(ground_truth: Instances, detections: Instances, thresholds):
    """:func:`match_image`'s matching; returns ``(matched detections (T, n_dt), matched ground truth (T, n_gt))``."""
    thresholds = np.minimum(np.asarray(thresholds, dtype=float), 1 - 1e-10)
    matched = np.zeros((len(thresholds), len(detections)), dtype=bool)
    taken = np.zeros((len(thresholds), len(ground_truth)), dtype=bool)
    d, g, iou = instance_ious(ground_truth, detections)
    keep = iou >= thresholds.min()
    d, g, iou = d[keep], g[keep], iou[keep]
    if d.size == 0:
        return matched, taken
    rank = np.empty(len(detections), dtype=int)
    rank[np.argsort(-detections.scores, kind="stable")] = np.arange(len(detections))
    order = np.lexsort((g, rank[d]))  # by detection rank, then ground-truth index
    d, g, iou = d[order], g[order], iou[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    # Sequential by nature (a match removes a ground truth for later detections); the loop runs
    # only over detections with a candidate, vectorised over thresholds and candidates.
    for start, stop in zip(starts, np.r_[starts[1:], d.size]):
        cand_g, cand_iou = g[start:stop], iou[start:stop]
        allowed = (cand_iou[None, :] >= thresholds[:, None]) & ~taken[:, cand_g]
        best = np.where(allowed, cand_iou[None, :], -1.0)
        last_best = best.shape[1] - 1 - np.argmax(best[:, ::-1], axis=1)
        hit = allowed.any(axis=1)
        taken[hit, cand_g[last_best[hit]]] = True
        matched[hit, d[start]] = True
    return matched, taken


@dataclass
class APResult:
    """COCO-style AP per class and threshold.

    Attributes
    ----------
    classes : list
        Class ids, one per column.
    thresholds : ndarray, shape (T,)
        IoU thresholds.
    precision : ndarray, shape (T, 101, K)
        Interpolated precision at the 101 recall points (pycocotools ``eval["precision"]``);
        NaN for a class without ground truth.
    recall : ndarray, shape (T, K)
        Final recall per threshold and class (NaN without ground truth).
    n_ground_truth, n_detections : ndarray, shape (K,)
        Instance counts per class over all images.
    """

    classes: list
    thresholds: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    n_ground_truth: np.ndarray
    n_detections: np.ndarray

    @property
    def ap(self) -> np.ndarray:
        """AP per threshold and class, shape (T, K)."""
        return self.precision.mean(axis=1)

    def _at(self, threshold: float) -> int:
        index = np.flatnonzero(np.isclose(self.thresholds, threshold))
        if index.size == 0:
            raise ValueError(f"IoU threshold {threshold} was not evaluated (have {self.thresholds.tolist()})")
        return int(index[0])

    def class_ap(self, threshold: float | None = None) -> np.ndarray:
        """AP per class at one threshold, or averaged over all thresholds (``None``)."""
        return self.ap.mean(axis=0) if threshold is None else self.ap[self._at(threshold)]

    def mean_ap(self, threshold: float | None = None) -> float:
        """Mean over classes with ground truth of :meth:`class_ap` (NaN when there are none)."""
        values = self.class_ap(threshold)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else math.nan

    @property
    def map50(self) -> float:
        """AP at IoU 0.50, mean over classes."""
        return self.mean_ap(0.5)

    @property
    def map95(self) -> float:
        """AP at IoU 0.95 (one threshold), mean over classes."""
        return self.mean_ap(0.95)

    @property
    def map50_95(self) -> float:
        """AP averaged over IoU 0.50:0.05:0.95 (COCO "AP"), mean over classes."""
        return self.mean_ap(None)

    def status(self, k: int | None = None) -> str:
        """Emptiness status of class column ``k`` (or of all classes together)."""
        gt = self.n_ground_truth if k is None else self.n_ground_truth[k]
        dt = self.n_detections if k is None else self.n_detections[k]
        return emptiness_status(bool(np.sum(gt)), bool(np.sum(dt)))

    def summary_values(self) -> list:
        """``map50``, ``map95`` and ``map50_95`` as :class:`MetricValue` (unit-free)."""
        status = Status.OK if np.any(self.n_ground_truth) else self.status()
        params = {"classes_averaged": int(np.count_nonzero(self.n_ground_truth)), "max_detections": "unlimited"}
        return [
            MetricValue("map50", self.map50, "", status, params),
            MetricValue("map95", self.map95, "", status, params),
            MetricValue("map50_95", self.map50_95, "", status, params),
        ]

    def class_values(self, k: int) -> list:
        """``ap50``, ``ap95``, ``ap50_95`` and instance counts of class column ``k``."""
        status = self.status(k)
        return [
            MetricValue("ap50", float(self.class_ap(0.5)[k]), "", status),
            MetricValue("ap95", float(self.class_ap(0.95)[k]), "", status),
            MetricValue("ap50_95", float(self.class_ap(None)[k]), "", status),
            MetricValue("n_instances_reference", float(self.n_ground_truth[k]), "count", status),
            MetricValue("n_instances_test", float(self.n_detections[k]), "count", status),
        ]


@dataclass
class ImageMatches:
    """What AP and detection counts need from one image, without its label maps.

    ``matched`` is ``(len(thresholds), n_detections)``: true positive at each IoU threshold;
    ``gt_matched`` is ``(len(thresholds), n_ground_truth)``: matched at each threshold.
    ``gt_diameters_mm`` / ``dt_diameters_mm``: each instance's size as an equivalent diameter
    (:func:`equivalent_diameter_mm`).
    """

    thresholds: np.ndarray
    gt_classes: np.ndarray
    dt_classes: np.ndarray
    dt_scores: np.ndarray
    matched: np.ndarray
    gt_matched: np.ndarray | None = None
    gt_diameters_mm: np.ndarray | None = None
    dt_diameters_mm: np.ndarray | None = None


def equivalent_diameter_mm(voxel_counts, spacing) -> np.ndarray:
    """Diameter in mm of the ball (3-D) or disc (2-D) with the instances' volume in mm³ (area in mm²).

    ``voxel_counts``: voxels (pixels) per instance; ``spacing``: voxel size in mm per array axis
    (``len(spacing)`` = dimension). A 1 mm³ voxel has an equivalent diameter of 1.24 mm.
    """
    ndim = len(spacing)
    measure = np.asarray(voxel_counts, dtype=float) * float(np.prod(spacing))
    unit_ball = math.pi ** (ndim / 2) / math.gamma(ndim / 2 + 1)  # volume of the unit-radius ball
    return 2 * (measure / unit_ball) ** (1 / ndim)


def image_matches(ground_truth: Instances, detections: Instances, thresholds=IOU_THRESHOLDS,
                  spacing=None) -> ImageMatches:
    """Match one image (see :func:`match_image`) and keep only classes, scores, matches and instance
    sizes (equivalent diameters in mm with ``spacing``, mm per array axis; default 1 per axis)."""
    thresholds = np.asarray(thresholds, dtype=float)
    spacing = (1.0,) * ground_truth.labels.ndim if spacing is None else spacing
    matched, gt_matched = _greedy_match(ground_truth, detections, thresholds)
    return ImageMatches(thresholds, ground_truth.classes, detections.classes, detections.scores, matched, gt_matched,
                        equivalent_diameter_mm(ground_truth.areas(), spacing),
                        equivalent_diameter_mm(detections.areas(), spacing))


def average_precision(images, class_ids=None, thresholds=IOU_THRESHOLDS) -> APResult:
    """COCO-style mask AP over a set of images.

    Parameters
    ----------
    images : iterable of (Instances, Instances)
        ``(ground_truth, detections)`` per image, in the order that breaks score ties.
    class_ids : iterable, optional
        Classes to report (columns); default every class seen in ground truth or detections.
    thresholds : array_like
        IoU thresholds (default the ten COCO thresholds 0.50:0.05:0.95).

    Precision at recall r is the highest precision at any recall >= r (101-point interpolation);
    precision at a recall point beyond the reached recall is 0.
    """
    return accumulate_ap([image_matches(gt, dt, thresholds) for gt, dt in images], class_ids, thresholds)


def accumulate_ap(matches, class_ids=None, thresholds=IOU_THRESHOLDS) -> APResult:
    """:func:`average_precision` from per-image :class:`ImageMatches` (image order breaks ties)."""
    thresholds = np.asarray(thresholds, dtype=float)
    empty = np.zeros(0)
    gt_class = np.concatenate([m.gt_classes for m in matches] or [empty])
    dt_class = np.concatenate([m.dt_classes for m in matches] or [empty])
    scores = np.concatenate([m.dt_scores for m in matches] or [empty])
    matched = np.concatenate([m.matched for m in matches], axis=1) if matches else np.zeros((len(thresholds), 0), bool)
    if class_ids is None:
        class_ids = np.unique(np.r_[gt_class, dt_class]).tolist()
    class_ids = list(class_ids)
    precision = np.full((len(thresholds), len(RECALL_POINTS), len(class_ids)), np.nan)
    recall = np.full((len(thresholds), len(class_ids)), np.nan)
    n_gt = np.array([np.count_nonzero(gt_class == c) for c in class_ids], dtype=int)
    n_dt = np.array([np.count_nonzero(dt_class == c) for c in class_ids], dtype=int)
    for k, class_id in enumerate(class_ids):
        if n_gt[k]:
            precision[:, :, k], recall[:, k] = _interpolated_precision(
                scores[dt_class == class_id], matched[:, dt_class == class_id], n_gt[k]
            )
    return APResult(class_ids, thresholds, precision, recall, n_gt, n_dt)


def _interpolated_precision(scores: np.ndarray, matched: np.ndarray, n_gt: int):
    """101-point precision ``(T, 101)`` and final recall ``(T,)`` of one class's detections."""
    order = np.argsort(-scores, kind="stable")
    tp = np.cumsum(matched[:, order], axis=1)
    fp = np.cumsum(~matched[:, order], axis=1)
    if tp.shape[1] == 0:
        return np.zeros((len(matched), len(RECALL_POINTS))), np.zeros(len(matched))
    recall = tp / n_gt
    precision = tp / (tp + fp)
    envelope = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    out = np.zeros((len(matched), len(RECALL_POINTS)))
    for t in range(len(matched)):
        index = np.searchsorted(recall[t], RECALL_POINTS, side="left")
        reached = index < recall.shape[1]
        out[t, reached] = envelope[t, index[reached]]
    return out, recall[:, -1]


#: Names of the instance (lesion) size bins, smallest first; their two edges are equivalent
#: diameters in mm (``Parameters.lesion_size_edges_mm``, default 3 and 10 mm).
SIZE_BINS = ("small", "medium", "large")


@dataclass
class DetectionResult:
    """Instance-wise detection counts at one IoU threshold, and precision, recall and F1.

    ``by_size`` (when size edges were given): ``{bin: (TP, FN, FP)}`` per :data:`SIZE_BINS` bin, TP and
    FN by the reference instance's equivalent diameter, FP by the test instance's; ``size_edges_mm``
    the two bin edges (a diameter equal to an edge goes to the larger bin).
    """

    iou_threshold: float
    true_positives: int
    false_positives: int
    false_negatives: int
    size_edges_mm: tuple = ()
    by_size: dict = field(default_factory=dict)

    def bin_recall(self, name: str) -> float:
        """TP / (TP + FN) of the reference instances in size bin ``name``; NaN when it has none."""
        tp, fn, _ = self.by_size[name]
        return tp / (tp + fn) if tp + fn else math.nan

    @property
    def precision(self) -> float:
        """TP / (TP + FP); NaN without detections."""
        n = self.true_positives + self.false_positives
        return self.true_positives / n if n else math.nan

    @property
    def recall(self) -> float:
        """TP / (TP + FN); NaN without ground-truth instances."""
        n = self.true_positives + self.false_negatives
        return self.true_positives / n if n else math.nan

    @property
    def f1(self) -> float:
        """2 TP / (2 TP + FP + FN); NaN when both sides have no instance."""
        n = 2 * self.true_positives + self.false_positives + self.false_negatives
        return 2 * self.true_positives / n if n else math.nan

    def values(self) -> list:
        """Precision, recall, F1 and counts as :class:`MetricValue` with an emptiness status."""
        status = emptiness_status(
            bool(self.true_positives + self.false_negatives), bool(self.true_positives + self.false_positives)
        )
        params = {"iou_threshold": self.iou_threshold}
        return [
            MetricValue("detection_precision", self.precision, "", status, params),
            MetricValue("detection_recall", self.recall, "", status, params),
            MetricValue("detection_f1", self.f1, "", status, params),
            MetricValue("true_positives", float(self.true_positives), "count", status, params),
            MetricValue("false_positives", float(self.false_positives), "count", status, params),
            MetricValue("false_negatives", float(self.false_negatives), "count", status, params),
        ] + self._size_values(status, params)

    def _size_values(self, status: str, params: dict) -> list:
        """Per size bin: ``detection_recall_<bin>``, ``true_positives_<bin>``, ``false_negatives_<bin>`` (by
        reference size) and ``false_positives_<bin>`` (by test size); none without size edges."""
        params = {**params, "size_edges_mm": list(self.size_edges_mm)}
        values = []
        for name, (tp, fn, fp) in self.by_size.items():
            values += [MetricValue(f"detection_recall_{name}", self.bin_recall(name), "", status, params),
                       MetricValue(f"true_positives_{name}", float(tp), "count", status, params),
                       MetricValue(f"false_negatives_{name}", float(fn), "count", status, params),
                       MetricValue(f"false_positives_{name}", float(fp), "count", status, params)]
        return values


def detection_scores(images, iou_threshold: float = 0.5, spacing=None, size_edges_mm=None) -> DetectionResult:
    """Lesion-wise detection over images: a detection is a TP when greedily matched at IoU >= threshold.

    ``images`` is an iterable of ``(ground_truth, detections)`` :class:`Instances`; matching is
    the same greedy, class-aware, score-ordered matching as :func:`average_precision`. With
    ``size_edges_mm`` (two equivalent diameters in mm), the counts are also split by size
    (:attr:`DetectionResult.by_size`), sizes measured with ``spacing`` (mm per array axis, default 1).
    """
    return count_detections([image_matches(gt, dt, [iou_threshold], spacing) for gt, dt in images], size_edges_mm)


def count_detections(matches, size_edges_mm=None) -> DetectionResult:
    """:func:`detection_scores` from per-image :class:`ImageMatches` made at one IoU threshold."""
    thresholds = {float(t) for m in matches for t in m.thresholds}
    if len(thresholds) > 1:
        raise ValueError(f"detection counts need matches at one IoU threshold, got {sorted(thresholds)}")
    tp = sum(int(m.matched.sum()) for m in matches)
    n_dt = sum(len(m.dt_classes) for m in matches)
    n_gt = sum(len(m.gt_classes) for m in matches)
    result = DetectionResult(thresholds.pop() if thresholds else math.nan, tp, n_dt - tp, n_gt - tp)
    if size_edges_mm is not None:
        result.size_edges_mm = tuple(size_edges_mm)
        result.by_size = _counts_by_size(matches, result.size_edges_mm)
    return result


def _counts_by_size(matches, edges) -> dict:
    """``{bin: (TP, FN, FP)}``: reference instances by their diameter, unmatched detections by theirs."""
    def joined(name, threshold_rows=False):
        arrays = [getattr(m, name)[0] if threshold_rows else getattr(m, name) for m in matches]
        return np.concatenate(arrays) if arrays else np.zeros(0)

    gt_bin, gt_hit = np.digitize(joined("gt_diameters_mm"), edges), joined("gt_matched", True).astype(bool)
    dt_bin, dt_hit = np.digitize(joined("dt_diameters_mm"), edges), joined("matched", True).astype(bool)
    return {name: (int(np.sum(gt_hit & (gt_bin == k))), int(np.sum(~gt_hit & (gt_bin == k))),
                   int(np.sum(~dt_hit & (dt_bin == k)))) for k, name in enumerate(SIZE_BINS)}
