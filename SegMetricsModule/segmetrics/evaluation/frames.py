"""Multi-class evaluation of a set of frames: challenge IoU, ISI-IoU, mcIoU, mDice (ISINet conventions).

Each frame is a 2-D label map ``(row, col)`` (or one 3-D volume ``(z, y, x)`` per case) of class
ids; 0 is background and never scored. Per frame and class c, with P = predicted pixels of c and
G = ground-truth pixels of c (pixel/voxel counts, no spacing needed)::

    IoU_c = |P ∩ G| / |P ∪ G|          Dice_c = 2 |P ∩ G| / (|P| + |G|)

- **challenge IoU**: per frame, mean IoU over the classes present in the ground truth; then mean
  over frames.
- **ISI-IoU**: per frame, mean IoU over the classes present in ground truth or prediction; then
  mean over frames.
- **mcIoU** / **mDice**: per class, mean over the frames where the class is in either; then mean
  over the classes with at least one such frame.
- **pooled IoU** (ISINet's printed "mIoU"): per class, Σ|P ∩ G| / Σ|P ∪ G| over all frames; then
  mean over the classes. A class absent from every frame follows ``absent_class`` as in mcIoU: left
  out (``"ignore"``), or scored 1 (``"one"``) or 0 (``"zero"``) and kept in the mean.

Edge rules (:class:`EdgeRules`, defaults = ISINet):

- ``absent_class="ignore"``: a class absent from both in a frame is left out for that frame
  (``"one"``: it scores 1 in ISI-IoU, mcIoU and mDice; ``"zero"``: it scores 0 there, so every
  listed class is averaged, the MISAW-Seg recipe).
- ``empty_frame="skip"``: a frame without any scored class in either is left out of challenge IoU
  and ISI-IoU (``"one"``: it scores 1 in both).
- ``empty_reference="skip"``: a frame whose ground truth has no scored class but whose prediction
  has one is left out of challenge IoU (``"zero"``: it scores 0). ISI-IoU scores such a frame 0.
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..spatial.geometry import geometry_differences
from ..registry import MetricValue, Parameters, Status, emptiness_status, positive_number
from ..inputs.validation import InputPolicy, NothingToCompareError, check_class_ids, check_evaluation_options

#: File endings read as frames (longest first so ``.nii.gz`` wins over ``.gz``).
FRAME_SUFFIXES = (".seg.nrrd", ".nii.gz", ".nii", ".nrrd", ".mha", ".mhd", ".png", ".npy", ".tif", ".tiff", ".bmp")
SUMMARY = "all classes"
#: IoU threshold of the detection counts when none is given (CLI ``--detection-iou``).
DETECTION_IOU = 0.5


@dataclass(frozen=True)
class EdgeRules:
    """How frames and classes without pixels are treated (see the module docstring)."""

    absent_class: str = "ignore"  # or "one", "zero"
    empty_frame: str = "skip"  # or "one"
    empty_reference: str = "skip"  # or "zero"

    def __post_init__(self):
        allowed = {"absent_class": ("ignore", "one", "zero"), "empty_frame": ("skip", "one"), "empty_reference": ("skip", "zero")}
        for name, choices in allowed.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")


def class_columns(label_map, class_ids) -> np.ndarray:
    """Column ``1..K`` of each pixel's class in ``class_ids`` (0 = background or unscored label)."""
    ids = np.asarray(class_ids)
    order = np.argsort(ids)
    position = np.searchsorted(ids[order], label_map).clip(max=len(ids) - 1)
    return np.where(ids[order][position] == label_map, order[position] + 1, 0)


def frame_overlaps(prediction, ground_truth, class_ids):
    """Per-class ``(intersection, predicted, reference)`` pixel counts of one frame, each shape (K,).

    One ``np.bincount`` over ``prediction_column * (K + 1) + reference_column``: the confusion
    matrix of the frame, whose diagonal, row sums and column sums are the three counts.
    """
    prediction, ground_truth = np.asarray(prediction), np.asarray(ground_truth)
    if prediction.shape != ground_truth.shape:
        axes = "(z, y, x)" if ground_truth.ndim == 3 else "(y, x)"
        raise ValueError(f"prediction shape {prediction.shape} differs from ground truth shape {ground_truth.shape} "
                         f"{axes}")
    k = len(class_ids) + 1
    joint = class_columns(prediction, class_ids) * k + class_columns(ground_truth, class_ids)
    confusion = np.bincount(joint.ravel(), minlength=k * k).reshape(k, k)  # rows: prediction
    return np.diag(confusion)[1:], confusion.sum(axis=1)[1:], confusion.sum(axis=0)[1:]


def _mean(values, axis=None):
    """Mean of the finite entries (NaN when there are none), without warnings."""
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finite, values, 0).sum(axis=axis) / finite.sum(axis=axis)


@dataclass
class FrameResult:
    """Per-frame, per-class pixel counts and every average derived from them.

    ``intersection``, ``predicted`` and ``reference`` are ``(n_frames, n_classes)`` pixel counts;
    ``pixels`` is the pixel count of each frame. ``instances`` / ``detection`` hold the optional
    instance AP (:class:`~segmetrics.metrics.instances.APResult`) and detection counts.
    """

    frame_names: list
    class_ids: list
    class_names: list
    intersection: np.ndarray
    predicted: np.ndarray
    reference: np.ndarray
    pixels: np.ndarray
    rules: EdgeRules = field(default_factory=EdgeRules)
    notes: list = field(default_factory=list)
    instances: object = None
    detection: object = None

    def _scores(self, numerator, denominator):
        """``numerator / denominator`` where the class is present (denominator > 0: the union or the
        pixel sum), else the ``absent_class`` score."""
        present = denominator > 0
        absent = {"one": 1.0, "zero": 0.0}.get(self.rules.absent_class, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(present, numerator / denominator, absent)

    @property
    def iou(self) -> np.ndarray:
        """IoU per frame and class (absent classes NaN, or 1 / 0 under ``absent_class="one"`` / ``"zero"``)."""
        return self._scores(self.intersection, self.predicted + self.reference - self.intersection)

    @property
    def dice(self) -> np.ndarray:
        """Dice per frame and class (absent classes as in :attr:`iou`)."""
        return self._scores(2 * self.intersection, self.predicted + self.reference)

    def _empty_frames(self, values):
        """Per-frame means with the frames empty in both set by the ``empty_frame`` rule."""
        frame_empty = (self.predicted + self.reference).sum(axis=1) == 0
        return np.where(frame_empty, 1.0 if self.rules.empty_frame == "one" else np.nan, values)

    @property
    def frame_challenge_iou(self) -> np.ndarray:
        """Per frame: mean IoU over the classes in the ground truth (NaN = frame skipped)."""
        values = _mean(np.where(self.reference > 0, self.iou, np.nan), axis=1)  # NaN when G is empty
        if self.rules.empty_reference == "zero":
            values = np.where(self.reference.sum(axis=1) == 0, 0.0, values)
        return self._empty_frames(values)

    @property
    def frame_isi_iou(self) -> np.ndarray:
        """Per frame: mean IoU over the classes in ground truth or prediction (NaN = frame skipped)."""
        return self._empty_frames(_mean(self.iou, axis=1))

    @property
    def class_iou(self) -> np.ndarray:
        """Per class: mean IoU over the frames where it counts (NaN when it never does)."""
        return _mean(self.iou, axis=0)

    @property
    def class_dice(self) -> np.ndarray:
        """Per class: mean Dice over the frames where it counts."""
        return _mean(self.dice, axis=0)

    @property
    def class_pooled_iou(self) -> np.ndarray:
        """Per class: Σ|P ∩ G| / Σ|P ∪ G| over all frames (ISINet's pooled IoU); a class present in no
        frame scores as an absent class (NaN, or 1 / 0 under ``absent_class="one"`` / ``"zero"``)."""
        union = (self.predicted + self.reference - self.intersection).sum(axis=0)
        return self._scores(self.intersection.sum(axis=0), union)

    def summary(self) -> dict:
        """``{name: MetricValue}`` for challenge_iou, isi_iou, mciou, mdice, pooled_iou (and map50, map95,
        map50_95)."""
        rules = asdict(self.rules)
        values = {}
        for name, per_item, unit_of_mean in (
            ("challenge_iou", self.frame_challenge_iou, "frames"),
            ("isi_iou", self.frame_isi_iou, "frames"),
            ("mciou", self.class_iou, "classes"),
            ("mdice", self.class_dice, "classes"),
            ("pooled_iou", self.class_pooled_iou, "classes"),
        ):
            used = int(np.isfinite(per_item).sum())
            status = Status.OK if used else self._overall_status()
            values[name] = MetricValue(name, float(_mean(per_item)), "", status, {**rules, f"n_{unit_of_mean}_used": used})
        if self.instances is not None:
            values.update({v.metric: v for v in self.instances.summary_values()})
        if self.detection is not None:
            values.update({v.metric: v for v in self.detection.values()})
        return values

    def _overall_status(self) -> str:
        return emptiness_status(bool(self.reference.sum()), bool(self.predicted.sum()))

    def class_values(self, k: int) -> list:
        """Metric values of class column ``k``: mean IoU and Dice, pooled IoU, pixel shares, frame counts (and AP)."""
        status = emptiness_status(bool(self.reference[:, k].sum()), bool(self.predicted[:, k].sum()))
        total = float(self.pixels.sum())
        values = [
            MetricValue("iou", float(self.class_iou[k]), "", status, {"n_frames_used": int(np.isfinite(self.iou[:, k]).sum())}),
            MetricValue("dice", float(self.class_dice[k]), "", status),
            MetricValue("pooled_iou", float(self.class_pooled_iou[k]), "", status),
            MetricValue("reference_pixel_share", self.reference[:, k].sum() / total if total else math.nan, "fraction", status),
            MetricValue("test_pixel_share", self.predicted[:, k].sum() / total if total else math.nan, "fraction", status),
            MetricValue("n_frames_reference", float((self.reference[:, k] > 0).sum()), "count", status),
            MetricValue("n_frames_test", float((self.predicted[:, k] > 0).sum()), "count", status),
        ]
        if self.instances is not None:
            values += self.instances.class_values(self.instances.classes.index(self.class_ids[k]))
        return values

    def records(self) -> list:
        """Summary and per-class records ``{structure, reference_label, test_label, metric, value, unit, status, params}``."""
        rows = [(SUMMARY, None, v) for v in self.summary().values()]
        rows += [(name, cid, v) for k, (cid, name) in enumerate(zip(self.class_ids, self.class_names))
                 for v in self.class_values(k)]
        return [_record(name, cid, v) for name, cid, v in rows]

    def frame_records(self) -> list:
        """Per-frame records: IoU and Dice of every class, and the frame's challenge and ISI IoU."""
        iou, dice = self.iou, self.dice
        challenge, isi = self.frame_challenge_iou, self.frame_isi_iou
        rows = []
        for i, frame in enumerate(self.frame_names):
            frame_status = emptiness_status(bool(self.reference[i].sum()), bool(self.predicted[i].sum()))
            rows.append({"frame": frame, **_record(SUMMARY, None, MetricValue("challenge_iou", float(challenge[i]), "", frame_status))})
            rows.append({"frame": frame, **_record(SUMMARY, None, MetricValue("isi_iou", float(isi[i]), "", frame_status))})
            for k, (cid, name) in enumerate(zip(self.class_ids, self.class_names)):
                status = emptiness_status(bool(self.reference[i, k]), bool(self.predicted[i, k]))
                rows.append({"frame": frame, **_record(name, cid, MetricValue("iou", float(iou[i, k]), "", status))})
                rows.append({"frame": frame, **_record(name, cid, MetricValue("dice", float(dice[i, k]), "", status))})
        return rows


def _record(structure, label, value: MetricValue) -> dict:
    return {"structure": structure, "reference_label": label, "test_label": label, "metric": value.metric,
            "value": value.value, "unit": value.unit, "status": value.status, "params": value.params}


def evaluate_frames(predictions, ground_truths, classes=None, rules: EdgeRules | None = None, frame_names=None) -> FrameResult:
    """Challenge IoU, ISI-IoU, mcIoU, mDice and pooled IoU of paired multi-class frames.

    Parameters
    ----------
    predictions, ground_truths : sequences of ndarray
        Paired label maps of class ids, 2-D ``(row, col)`` frames or 3-D ``(z, y, x)`` volumes;
        each pair must have one shape. Counts are in pixels/voxels (spacing plays no role). Each
        frame passes the label-map checks of files (:func:`segmetrics.inputs.validation.check_label_map`):
        probability maps, NaN, negative or intensity-like values are refused (:class:`ReadError`).
    classes : dict or iterable of int, optional
        ``{class id: name}`` or class ids to score; default every non-zero label found. Label 0
        is never scored; labels not listed count as background.
    rules : EdgeRules, optional
        Edge rules (default ISINet: absent classes ignored, empty frames skipped, frames with
        empty ground truth skipped by challenge IoU; ``EdgeRules(absent_class="zero")`` is the
        MISAW-Seg recipe).
    frame_names : list of str, optional
        Names used in per-frame records (default ``"0"``, ``"1"``, ...).
    """
    check_class_ids(classes)
    predictions, ground_truths = list(predictions), list(ground_truths)
    if len(predictions) != len(ground_truths):
        raise ValueError(f"{len(predictions)} predictions but {len(ground_truths)} ground-truth frames")
    names = list(frame_names) if frame_names is not None else [str(i) for i in range(len(predictions))]
    predictions = [_label_frame(frame, f"prediction frame {name}") for frame, name in zip(predictions, names)]
    ground_truths = [_label_frame(frame, f"ground-truth frame {name}") for frame, name in zip(ground_truths, names)]
    if classes is None:
        classes = found_labels(predictions + ground_truths)
    return frame_counts(zip(predictions, ground_truths), classes, rules, frame_names)


def _label_frame(frame, name: str) -> np.ndarray:
    """An in-memory frame as integer labels, after the label-map checks files pass (a probability
    map, NaN, negative or intensity-like values are refused; :mod:`segmetrics.inputs.validation`)."""
    from ..inputs.io import load_label_image

    frame = np.asarray(frame)
    return load_label_image(frame, spacing=(1.0,) * frame.ndim, name=name).array


def found_labels(frames) -> list:
    """Sorted non-zero labels occurring in any of ``frames``."""
    found = set()
    for frame in frames:
        found.update(np.unique(frame).tolist())
    return sorted(found - {0})


def frame_counts(pairs, classes, rules: EdgeRules | None = None, frame_names=None) -> FrameResult:
    """:func:`evaluate_frames` from an iterable of ``(prediction, ground_truth)`` arrays, consumed
    once (frames are not kept), with the classes given as ``{id: name}`` or ids."""
    names = dict(classes) if isinstance(classes, dict) else {c: str(c) for c in classes}
    names.pop(0, None)
    class_ids = sorted(names)
    if not class_ids:
        raise NothingToCompareError("nothing to compare: no class to score (every frame is empty and no classes "
                                    "were given)")
    counts, pixels = [], []
    for prediction, ground_truth in pairs:
        counts.append(frame_overlaps(prediction, ground_truth, class_ids))
        pixels.append(np.asarray(ground_truth).size)
    counts = np.array(counts, dtype=np.int64).reshape(len(counts), 3, len(class_ids))
    return FrameResult(
        frame_names=list(frame_names) if frame_names is not None else [str(i) for i in range(len(counts))],
        class_ids=class_ids,
        class_names=[names[c] for c in class_ids],
        intersection=counts[:, 0],
        predicted=counts[:, 1],
        reference=counts[:, 2],
        pixels=np.array(pixels, dtype=np.int64),
        rules=rules or EdgeRules(),
    )


# ------------------------------------------------------------------------------------------
# Folders of frames


def frame_key(path: Path):
    """File name without its image suffix (``a.nii.gz`` -> ``a``); None for other files."""
    name = path.name
    suffix = next((s for s in FRAME_SUFFIXES if name.lower().endswith(s)), None)
    return name[: -len(suffix)] if suffix and not name.startswith(".") else None


def pair_frames(prediction_dir, ground_truth_dir):
    """Pair frame files of two folders by file name (suffix ignored).

    Returns ``(pairs, prediction_only, ground_truth_only)`` with ``pairs`` a name-sorted list of
    ``(name, prediction_path, ground_truth_path)``.
    """
    found = []
    for folder in (Path(prediction_dir), Path(ground_truth_dir)):
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: not a folder")
        found.append({frame_key(p): p for p in sorted(folder.iterdir()) if p.is_file() and frame_key(p)})
    predicted, reference = found
    pairs = [(key, predicted[key], reference[key]) for key in sorted(predicted.keys() & reference.keys())]
    return pairs, sorted(predicted.keys() - reference.keys()), sorted(reference.keys() - predicted.keys())


#: Folder-name words of predictions and of references, for :func:`swapped_by_name`.
PREDICTION_WORDS = ("pred", "prediction", "predictions", "predicted", "test", "output", "outputs", "out", "result",
                    "results", "infer", "inference", "auto", "model")
REFERENCE_WORDS = ("gt", "ground", "groundtruth", "truth", "label", "labels", "ref", "reference", "references",
                   "mask", "masks", "manual", "annotation", "annotations", "gold", "target", "targets", "true")


def _folder_kind(folder) -> str | None:
    """``"prediction"`` or ``"reference"`` when the folder's name holds words of one kind only, else None.
    Words are split at non-letters and at camel case (``labelsTs``, ``GroundTruth``); a plural ``s`` is
    dropped too (``preds``, ``gts``)."""
    found = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", Path(folder).resolve().name)
    words = {word.lower() for word in found} | {word.lower().removesuffix("s") for word in found}
    is_prediction, is_reference = bool(words & set(PREDICTION_WORDS)), bool(words & set(REFERENCE_WORDS))
    return "prediction" if is_prediction and not is_reference else "reference" if is_reference and not is_prediction else None


def _probability_like(path) -> bool:
    """Whether a frame file holds non-integer values (a probability or score map, not a label map)."""
    values = np.asarray(read_frame(path, labels=False))
    return values.dtype.kind == "f" and bool(np.any(values != np.round(values)))


def swapped_by_name(reference_dir, test_dir) -> str | None:
    """Why ``reference_dir`` and ``test_dir`` look given in the old order (prediction first), by their
    names, or None: the first is named like predictions (``pred``, ``output``, ``results``, ...) and the
    second like references (``gt``, ``labels``, ``ref``, ``masks``, ``ground_truth``, ...)."""
    if (_folder_kind(reference_dir), _folder_kind(test_dir)) != ("prediction", "reference"):
        return None
    return (f"the first folder ({Path(reference_dir).resolve().name}) is named like predictions and the second "
            f"({Path(test_dir).resolve().name}) like references")


def swapped_by_content(reference_dir, test_dir) -> str | None:
    """Why the folders may be in the old order by their content, or None: the first pair's frame in
    ``reference_dir`` holds non-integer (probability-like) values and the one in ``test_dir`` integer
    labels. Only a hint: soft references exist (MetricsReloaded's brain lesion references hold rater
    fractions), and folders whose names say which is which are not checked."""
    if _folder_kind(reference_dir) == "reference" or _folder_kind(test_dir) == "prediction":
        return None
    pairs = pair_frames(test_dir, reference_dir)[0]
    if not pairs:
        return None
    name, test_path, reference_path = pairs[0]
    try:
        swapped = _probability_like(reference_path) and not _probability_like(test_path)
    except (OSError, RuntimeError, ValueError):  # an unreadable frame: the evaluation reports it
        return None
    return (f"frame {name} of the first folder holds probability-like (non-integer) values and that of the second "
            "integer labels") if swapped else None


def read_frame(path, labels: bool = True, threshold: float | None = None, input_policy=None) -> np.ndarray:
    """Array of a frame file (``.npy`` via NumPy, images via :mod:`segmetrics.inputs.io`), array-axis order.

    ``threshold`` binarises (``value >= threshold`` -> 1) probability maps; ``labels=False`` returns
    the values unchanged (probability or score maps). Label frames pass the input checks of
    :mod:`segmetrics.inputs.validation` with ``input_policy`` (:class:`segmetrics.inputs.io.InputPolicy`).
    """
    path = Path(path)
    if labels:
        return read_label_frame(path, threshold, input_policy).array
    return _score_map(path, input_policy).array


def read_label_frame(path, threshold: float | None = None, input_policy=None):
    """A label frame as a :class:`~segmetrics.spatial.geometry.LabelImage` (array and spacing in mm; ``.npy``
    frames have 1 mm pixels, i.e. pixel units), checked as in :func:`read_frame`."""
    from ..inputs.io import load_label_image

    path = Path(path)
    if path.suffix.lower() != ".npy":
        return load_label_image(path, threshold=threshold, input_policy=input_policy)
    array = _load_npy(path)
    return load_label_image(array, spacing=(1.0,) * array.ndim, threshold=threshold, input_policy=input_policy,
                            name=str(path))


def _load_npy(path: Path) -> np.ndarray:
    """The array of a ``.npy`` frame; a file cut short, damaged or holding Python objects is refused
    in one line naming it (NumPy's messages do not)."""
    from ..inputs.io import ReadError

    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ReadError(f"{path}: cannot be read as a NumPy array ({error})") from error


def read_scores(path) -> dict:
    """Instance scores ``{frame name: {instance id: score}}`` from a JSON object or a CSV with
    columns ``frame,instance,score``."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        table: dict = {}
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                try:
                    table.setdefault(row["frame"], {})[int(row["instance"])] = float(row["score"])
                except (KeyError, TypeError, ValueError) as error:
                    raise ValueError(f"{path}: needs columns frame,instance,score with numbers ({error})") from error
    else:
        try:
            raw = json.loads(path.read_text())
            table = {str(frame): {int(k): float(v) for k, v in scores.items()} for frame, scores in raw.items()}
        except (ValueError, AttributeError) as error:
            raise ValueError(f'{path}: expected JSON like {{"frame": {{"1": 0.9}}}} ({error})') from error
    bad = next(((frame, instance, score) for frame, scores in table.items() for instance, score in scores.items()
                if not math.isfinite(score)), None)
    if bad is not None:
        raise ValueError(f"{path}: the score of instance {bad[1]} of frame {bad[0]} is {bad[2]}, not a finite number "
                         "(it would rank the instance arbitrarily)")
    return table


def evaluate_folders(prediction_dir, ground_truth_dir, classes=None, rules: EdgeRules | None = None,
                     instances: bool = False, connectivity: int | None = None, scores=None,
                     detection_iou: float = DETECTION_IOU, instance_dirs=None, threshold: float | None = None,
                     input_policy=None, size_edges_mm=None) -> FrameResult:
    """:func:`evaluate_frames` on two folders paired by file name, optionally with instance AP.

    Parameters
    ----------
    prediction_dir, ground_truth_dir : path
        Folders of frames (PNG, NRRD, NIfTI, MHA or ``.npy``); unmatched files are listed in
        ``notes``. Frames are taken in file-name order (this order breaks AP score ties).
    classes : dict or iterable, optional
        As in :func:`evaluate_frames`.
    instances : bool
        Also compute COCO mask AP and detection precision/recall/F1.
    connectivity : int, optional
        Connectivity of the connected components per class (1 = face neighbours ... ndim = corner
        neighbours; default ndim).
    scores : path, optional
        A folder of probability/score maps paired by name (score = mean inside the instance), or
        a JSON/CSV file of scores per frame and instance id; default every score is 1.
    detection_iou : float
        IoU threshold of the detection counts.
    instance_dirs : (path, path), optional
        Folders of instance label maps (prediction, ground truth) paired by name; each instance
        takes the class covering most of it in the frame. Default: connected components.
    threshold : float, optional
        Binarise every frame at this value (``>=`` -> class 1), e.g. 0.5 for probability maps.
    input_policy : segmetrics.inputs.io.InputPolicy, optional
        Overrides of the input checks (lossy pictures, many labels, external data files);
        instance maps may always hold many labels.
    size_edges_mm : (float, float), optional
        Equivalent diameters (mm; pixels for PNG and ``.npy`` frames, whose pixels count as 1 mm)
        between small, medium and large instances: the detection counts are also given per size
        (:data:`segmetrics.metrics.instances.SIZE_BINS`); default and checks as ``Parameters.lesion_size_edges_mm``.
    """
    from ..metrics.instances import IOU_THRESHOLDS, accumulate_ap, count_detections, image_matches

    check_evaluation_options(threshold=threshold, input_policy=input_policy)
    check_class_ids(classes)
    positive_number("detection_iou", detection_iou, maximum=1.0)
    size_edges_mm = (Parameters() if size_edges_mm is None
                     else Parameters(lesion_size_edges_mm=size_edges_mm)).lesion_size_edges_mm
    policy = input_policy or InputPolicy()

    pairs, prediction_only, reference_only = pair_frames(prediction_dir, ground_truth_dir)
    if not pairs:
        raise ValueError(f"no frame file names in common between {prediction_dir} and {ground_truth_dir}")
    notes = []
    if prediction_only:
        notes.append(f"{len(prediction_only)} prediction frame(s) without ground truth, skipped: {', '.join(prediction_only[:10])}")
    if reference_only:
        notes.append(f"{len(reference_only)} ground-truth frame(s) without prediction, skipped: {', '.join(reference_only[:10])}")
    names = [name for name, _, _ in pairs]
    if classes is None:
        classes = found_labels(read_frame(path, threshold=threshold, input_policy=policy)
                               for _, *paths in pairs for path in paths)
    class_ids = sorted(set(classes) - {0})
    score_source = _score_source(scores, names, policy) if instances else None
    ap_matches, detection_matches = [], []

    def frames():
        """Read each pair once; instance matches are collected on the way."""
        for name, prediction_path, reference_path in pairs:
            prediction_image = read_label_frame(prediction_path, threshold, policy)
            reference_image = read_label_frame(reference_path, threshold, policy)
            prediction, reference = prediction_image.array, reference_image.array
            ground_truth = (reference_path, reference_image)
            check_frame_grid(name, "prediction", prediction_path, prediction_image, *ground_truth)
            if instances:
                gt, dt = _frame_instances(name, prediction, ground_truth, class_ids, connectivity, instance_dirs, policy)
                dt = score_source(name, dt, ground_truth)
                ap_matches.append(image_matches(gt, dt, IOU_THRESHOLDS))
                detection_matches.append(image_matches(gt, dt, [detection_iou], reference_image.spacing))
            yield prediction, reference

    result = frame_counts(frames(), classes, rules, names)
    result.notes = notes
    if instances:
        result.instances = accumulate_ap(ap_matches, class_ids)
        result.detection = count_detections(detection_matches, size_edges_mm)
    return result


def check_frame_grid(name, what: str, path, image, reference_path, reference_image) -> None:
    """Refuse ``image`` (read from ``path``: the prediction, an instance or a score map of frame
    ``name``, a :class:`~segmetrics.spatial.geometry.LabelImage`) when its grid is not that of the frame's
    ground truth: frames are compared voxel by voxel, so another storage of the same grid (flipped,
    transposed) or another spacing or origin would pair other voxels. With a file without geometry
    on either side (``.npy``, pictures such as PNG: 1 mm pixels at 0) only the shapes are compared."""
    from ..inputs.readers.pictures import SUFFIXES as PICTURE_SUFFIXES

    differences = geometry_differences(reference_image, image)
    if {Path(path).suffix.lower(), Path(reference_path).suffix.lower()} & {".npy", *PICTURE_SUFFIXES}:
        differences = differences[:1] if image.array.shape != reference_image.array.shape else []
    if differences:
        raise ValueError(f"frame {name}: the {what} is on another grid than the ground truth ({'; '.join(differences)}); "
                         f"frames compares them voxel by voxel: save the {what} on the ground truth's grid")


def _frame_instances(name, prediction, ground_truth, class_ids, connectivity, instance_dirs, policy):
    """Ground-truth and predicted instances of one frame (components, or instance label maps, which
    may hold any number of instances, on the grid of the frame's ``ground_truth``: ``(path, LabelImage)``)."""
    from ..metrics.instances import instances_from_labels, instances_from_semantic

    reference = ground_truth[1].array
    if instance_dirs is None:
        return (instances_from_semantic(reference, connectivity, class_ids),
                instances_from_semantic(prediction, connectivity, class_ids))
    built = []
    for folder, classes in zip(instance_dirs, (prediction, reference)):
        path = next((p for p in Path(folder).iterdir() if frame_key(p) == name), None)
        if path is None:
            raise ValueError(f"{folder}: no instance map for frame {name}")
        instance_image = read_label_frame(path, input_policy=replace(policy, allow_many_labels=True))
        check_frame_grid(name, f"instance map {path.name}", path, instance_image, *ground_truth)
        built.append(instances_from_labels(instance_image.array, classes).keep_classes(class_ids))
    return built[1], built[0]


def _score_source(scores, names, policy):
    """A function ``(frame name, Instances, ground truth) -> scored Instances`` for the chosen score
    source; ``ground truth`` is ``(path, LabelImage)`` of the frame, whose grid a score map must have."""
    from ..metrics.instances import scores_from_mapping, scores_from_probability

    if scores is None:
        return lambda name, instances, ground_truth: instances
    scores = Path(scores)
    if scores.is_dir():
        maps = {frame_key(p): p for p in scores.iterdir() if frame_key(p)}
        missing = [n for n in names if n not in maps]
        if missing:
            raise ValueError(f"{scores}: no score map for frame(s) {', '.join(missing[:10])}")

        def from_map(name, instances, ground_truth):
            score_map = _score_map(maps[name], policy)
            check_frame_grid(name, f"score map {maps[name].name}", maps[name], score_map, *ground_truth)
            return scores_from_probability(instances, score_map.array)
        return from_map
    if not scores.is_file():
        raise FileNotFoundError(f"{scores}: no such score file or folder")
    table = read_scores(scores)
    return lambda name, instances, ground_truth: scores_from_mapping(instances, table.get(name, {}))


def _score_map(path: Path, policy):
    """A score (probability) map of a frame as a :class:`~segmetrics.spatial.geometry.LabelImage`, values
    unchanged (``.npy``: 1 mm pixels)."""
    from ..spatial.geometry import LabelImage
    from ..inputs.io import ReadError, read_label_image

    if path.suffix.lower() == ".npy":
        array = _load_npy(path)
        image = LabelImage(array, (1.0,) * array.ndim)
    else:
        image = read_label_image(path, input_policy=policy)
    if not np.issubdtype(image.array.dtype, np.number) or not np.isfinite(image.array).all():
        raise ReadError(f"{path}: a score map must hold finite numbers (NaN or infinite scores would rank the "
                        "instances arbitrarily)")
    return image


# ------------------------------------------------------------------------------------------
# Output


def result_json(result: FrameResult) -> dict:
    """JSON-ready dict: the summary values by name (``challenge_iou``, ``isi_iou``, ``mciou``,
    ``mdice``, ``pooled_iou`` and, with instances, ``map50``, ``map95``, ``map50_95``, detection scores), the edge
    rules, the summary and per-class records, the per-frame records and the notes."""
    from ..outputs.tables import json_record, json_value

    return {
        **{name: json_value(v.value) for name, v in result.summary().items()},
        "edge_rules": asdict(result.rules),
        "n_frames": len(result.frame_names),
        "records": [json_record(r) for r in result.records()],
        "frames": [json_record(r) for r in result.frame_records()],
        "notes": list(result.notes),
    }


def frame_tables(result: FrameResult) -> list:
    """Renderables for the terminal, in the style and precision of ``segmetrics compare``'s table
    (:func:`segmetrics.outputs.tables.terminal_table`, :func:`~segmetrics.outputs.tables.display_value`):
    a header line, the summary, the per-class table and the rounding line."""
    from rich.text import Text  # class names as plain text, not rich markup

    from ..outputs.tables import display_value, rounding_note, terminal_table

    def shown(value: MetricValue) -> str:
        return display_value(value.value, value.unit or "1")  # frame ratios (IoU, Dice, AP) carry no unit

    rules = ", ".join(f"{k} {v}" for k, v in asdict(result.rules).items())
    summary = terminal_table()
    for column in ("metric", "value", "status"):
        summary.add_column(column, justify="right" if column == "value" else "left", no_wrap=True)
    for name, value in result.summary().items():
        summary.add_row(name, shown(value), value.status)
    per_class = terminal_table()
    per_class.add_column("metric", no_wrap=True)
    per_class.add_column("unit", no_wrap=True)
    for cid, name in zip(result.class_ids, result.class_names):
        per_class.add_column(Text(f"{name} ({cid})"), justify="right", no_wrap=True)
    columns = [result.class_values(k) for k in range(len(result.class_ids))]
    per_class.add_row("status", "", *(values[0].status for values in columns), end_section=True)
    for row, first in enumerate(columns[0] if columns else []):
        per_class.add_row(first.metric, first.unit, *(shown(values[row]) for values in columns))
    return [Text(f"{len(result.frame_names)} frames · {len(result.class_ids)} classes · edge rules {rules}", style="bold"),
            summary,
            Text("per class (means over the frames where the class counts)", style="bold"),
            per_class,
            Text(f"{rounding_note(None)}; files keep full precision")]


def write_frame_result(result: FrameResult, fmt: str = "table", path=None) -> None:
    """Write a :class:`FrameResult` as a terminal table, CSV (all records, ``frame`` column) or JSON."""
    import io
    import sys

    from ..outputs.tables import RECORD_FIELDS, records_to_csv, write_text

    if fmt == "json":
        text = json.dumps(result_json(result), indent=2, default=str)
    elif fmt == "csv":
        text = records_to_csv(result.records() + result.frame_records(), ("frame",) + RECORD_FIELDS)
    elif fmt == "table":
        from rich.console import Console

        console = Console(file=io.StringIO() if path else None, width=200 if path else None)
        for part in frame_tables(result):
            console.print(part)
        if path:
            write_text(path, console.file.getvalue())
    else:
        raise ValueError(f"unknown format {fmt!r} (table, csv or json)")
    if fmt != "table":
        if path:
            write_text(path, text + "\n")
        else:
            sys.stdout.write(text + "\n")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
