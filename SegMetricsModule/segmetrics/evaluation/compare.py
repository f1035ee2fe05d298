"""The public entry point: pair the structures of two label images and run the selected metrics."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..spatial.checkpoints import checkpoint
from ..spatial.geometry import LabelImage, check_same_geometry, geometry_differences, resample_nearest, union_box
from ..spatial.orientation import Reorientation, canonical
from ..registry import (MetricValue, Parameters, Status, StructurePair, all_groups, as_parameters,
                       resolve_selection)
from ..inputs.readers.rtdose import load_dose
from ..inputs.structure_names import match_structures, synonym_map
from ..inputs.validation import NothingToCompareError, check_evaluation_options


@dataclass
class StructureResult:
    """All metric values of one reference/test structure pair, plus non-scalar extras."""

    structure: str
    reference_label: object
    test_label: object
    values: list
    extras: dict = field(default_factory=dict)

    def get(self, metric: str) -> MetricValue:
        """The :class:`MetricValue` of one metric by name (KeyError when it was not computed)."""
        for v in self.values:
            if v.metric == metric:
                return v
        raise KeyError(metric)

    def value(self, metric: str) -> float:
        """The value of one metric by name (KeyError when it was not computed)."""
        return self.get(metric).value

    @property
    def status(self) -> str:
        """The distinct non-``ok`` statuses of the values, comma-joined (``ok`` when none).

        ``not_applicable`` (a metric that does not exist for this input, e.g. ``msi_3d`` in 2-D)
        is left out.
        """
        statuses = {v.status for v in self.values} - {Status.OK, Status.NOT_APPLICABLE}
        return ", ".join(sorted(statuses)) or Status.OK


@dataclass(frozen=True)
class PairSurfaces:
    """The 3-D surfaces the metric groups measured a structure pair on (``extras["surfaces"]``).

    ``reference`` and ``test`` are :class:`segmetrics.spatial.mesh.Surface` (``None`` for an empty mask) in
    the groups' working frame: the canonical orientation of the pair's bounding box, mapped to the
    stored array by ``orientation`` (a :class:`~segmetrics.spatial.orientation.Reorientation`), with
    ``spacing`` the working image's voxel size (mm, its array order). Distances between them are
    those of the stored masks; their vertices are in the order of the polydata in ``extras``.
    """

    reference: object
    test: object
    orientation: Reorientation
    spacing: tuple

    def polydata(self, which: str):
        """``vtkPolyData`` of the ``"reference"`` or ``"test"`` surface in the stored image's
        index-scaled frame (:meth:`~segmetrics.spatial.orientation.Reorientation.polydata_to_stored`)."""
        from ..spatial.mesh import to_polydata

        return self.orientation.polydata_to_stored(to_polydata(getattr(self, which)), self.spacing)


@dataclass
class ComparisonResult:
    """Per-structure results; ``notes`` says how the inputs were prepared (e.g. resampling);
    ``params`` are the :class:`Parameters` used; ``provenance`` (see :mod:`segmetrics.evaluation.provenance`)
    names the software version, time, inputs, reference grid and settings."""

    structures: list
    notes: list = field(default_factory=list)
    params: Parameters | None = None
    provenance: dict = field(default_factory=dict)

    def __getitem__(self, structure: str) -> StructureResult:
        for s in self.structures:
            if s.structure == structure:
                return s
        raise KeyError(structure)

    def records(self) -> list:
        """Flat list of dicts ``{structure, reference_label, test_label, metric, value, unit, status, params}``."""
        return [
            {
                "structure": s.structure,
                "reference_label": s.reference_label,
                "test_label": s.test_label,
                "metric": v.metric,
                "value": v.value,
                "unit": v.unit,
                "status": v.status,
                "params": v.params,
            }
            for s in self.structures
            for v in s.values
        ]

    def metrics(self) -> list:
        """Names of the computed metrics, in registry order."""
        return list(dict.fromkeys(v.metric for s in self.structures for v in s.values))

    def wide_rows(self) -> list:
        """One dict per structure: ``structure``, ``reference_label``, ``test_label``, ``status``, then
        one key per metric (units in the metric names: ``_mm``, ``_ml``; others are ratios)."""
        return [{"structure": s.structure, "reference_label": s.reference_label, "test_label": s.test_label,
                 "status": s.status, **{v.metric: v.value for v in s.values}} for s in self.structures]

    def to_dataframe(self, layout: str = "wide"):
        """The values as a ``pandas.DataFrame`` (pandas comes with the pip package; inside Slicer: ``pip install pandas``).

        ``layout="wide"``: one row per structure (:meth:`wide_rows`), NaN for undefined values and
        ``inf`` for a missed structure's Hausdorff distances; ``layout="long"``: one row per structure
        and metric (:meth:`records`, with ``unit``, ``status`` and ``params``). The provenance is in
        ``DataFrame.attrs["provenance"]`` and the notes in ``attrs["notes"]``.
        """
        try:
            import pandas as pd
        except ImportError as error:
            raise ImportError("to_dataframe needs pandas (not part of Slicer's Python): pip install pandas") from error
        if layout not in ("wide", "long"):
            raise ValueError(f"layout must be 'wide' or 'long', got {layout!r}")
        rows = self.wide_rows() if layout == "wide" else self.records()
        frame = pd.DataFrame(rows, columns=None if rows else ["structure"])
        frame.attrs.update(provenance=self.provenance, notes=list(self.notes))
        return frame

    def class_means(self) -> dict:
        """Mean of each metric over the structures where it is finite, with the counts used.

        Returns ``{metric: {"mean", "n_used", "n_total", "unit"}}``; structures whose value is NaN
        or inf are counted in ``n_total`` but not averaged (the report says how many).
        """
        by_metric: dict = {}
        for s in self.structures:
            for v in s.values:
                by_metric.setdefault(v.metric, (v.unit, []))[1].append(v.value)
        means = {}
        for metric, (unit, values) in by_metric.items():
            finite = [x for x in values if x is not None and math.isfinite(x)]
            means[metric] = {
                "mean": float(np.mean(finite)) if finite else math.nan,
                "n_used": len(finite),
                "n_total": len(values),
                "unit": unit,
            }
        return means


#: Foreground values of binary masks (0/1 label maps, 0/255 pictures): two masks with one of them
#: each are one structure whatever the values (:func:`_structure_pairs`).
MASK_VALUES = (1, 255)


def selected_groups(metrics, dose_given: bool = False) -> dict:
    """:func:`segmetrics.registry.resolve_selection` of ``metrics``; a given dose selects the dose
    group (every dose metric, unless ``metrics`` names some): a dose is never read for nothing."""
    selection = resolve_selection(metrics)
    if dose_given and "dose" not in selection:
        selection["dose"] = resolve_selection("dose")["dose"]
    return selection


def _structures(image: LabelImage) -> dict:
    """``{name: label}``: the image's named structures (kept even when empty, e.g. declared
    ``.seg.nrrd`` segments) plus every present label, named by its value when it has no name."""
    entries = {name: label for label, name in sorted(image.names.items())}
    for label in image.labels():
        entries.setdefault(image.names.get(label, str(label)), label)
    return entries


def _structure_pairs(reference: LabelImage, test: LabelImage, labels=None, synonyms=None):
    """Return ``([(name, reference_label, test_label), ...], notes)`` for the structures to compare.

    Structures are paired by name (a label without a name is named by its value, so unnamed
    label maps pair by value; when only one image names its structures, the other's labels take
    the names of the same values, except the ROI numbers of an RT Structure Set, which are no label
    values: its ROIs pair by name only), named structures also ignoring case and separators and by
    ``synonyms`` (:mod:`segmetrics.inputs.structure_names`); structures left unpaired are listed in a note
    and compared with an empty mask. Two single-structure masks with different foreground values
    (:data:`MASK_VALUES`: 0/255 vs 0/1 pictures) are paired as one structure, with a note; two
    other single labels (label maps each holding one structure, e.g. 1 and 2) are different
    structures. ``labels`` selects structures by name or label value (``5`` and ``5.0`` alike);
    an unknown name raises ``ValueError``.
    """
    ref_entries, test_entries = _structures(reference), _structures(test)
    notes = []
    unnamed = not reference.names and not test.names
    if unnamed and len(ref_entries) == 1 and len(test_entries) == 1 and ref_entries.keys() != test_entries.keys() \
            and {*ref_entries.values(), *test_entries.values()} <= set(MASK_VALUES):
        (ref_label,), (test_label,) = ref_entries.values(), test_entries.values()
        notes.append(f"binary masks with different foreground values ({ref_label} vs {test_label}) compared as one structure")
        pairs = [("foreground", ref_label, test_label)]
    else:
        if bool(reference.names) != bool(test.names):  # names on one side only: the other's labels pair by value
            named, plain = (ref_entries, test_entries) if reference.names else (test_entries, ref_entries)
            by_value = {label: name for name, label in named.items()}
            valued = {name: by_value[label] for name, label in plain.items()
                      if label in by_value and by_value[label] not in plain}  # a name the plain side has stays apart
            side = "test" if reference.names else "reference"
            if hasattr(reference if reference.names else test, "contours"):  # ROI numbers are no label values
                notes += [f"{side} label {name} (its image names no structures) not paired with ROI {name} "
                          f"({new!r}) of the RT Structure Set: ROI numbers are not label values; name the labels "
                          "with a name map (names=, CLI: --names)" for name, new in valued.items()]
            else:
                plain = {valued.get(name, name): label for name, label in plain.items()}
                ref_entries, test_entries = (ref_entries, plain) if reference.names else (plain, test_entries)
                notes += [f"{side} label {name} (its image names no structures) paired by value with {new!r}"
                          for name, new in valued.items()]
        matches, ambiguities = match_structures(ref_entries, test_entries, synonyms)
        renamed = {match.test: match.reference for match in matches}
        test_entries = {renamed.get(name, name): label for name, label in test_entries.items()}
        notes += [f"test structure {m.test!r} paired with reference {m.reference!r} ({m.rule})" for m in matches]
        notes += [f"ambiguous names left unpaired ({a.rule}): test {', '.join(map(repr, a.tests))} and reference "
                  f"{', '.join(map(repr, a.references))}" for a in ambiguities]
        if reference.names and test.names:
            notes += [f"{side} only: {', '.join(map(repr, only))}" for side, only in (
                ("unmatched structures, reference", [n for n in ref_entries if n not in test_entries]),
                ("unmatched structures, test", [n for n in test_entries if n not in ref_entries])) if only]
        names = list(ref_entries) + [name for name in test_entries if name not in ref_entries]
        if unnamed:
            names.sort(key=lambda name: _as_number(name))
        pairs = [(name, _partner(name, ref_entries, test_entries), _partner(name, test_entries, ref_entries))
                 for name in names]
    if labels is None:
        return pairs, notes
    chosen, unknown = [], []
    for given in map(str, labels):  # exact first: a structure name may begin or end with white space
        item, value = given.strip(), _as_number(given)
        match = [p for p in pairs if given == p[0] or (value is not None and value in p[1:])] or \
            [p for p in pairs if item == p[0]]
        if match:
            chosen += [p for p in match if p not in chosen]
        elif value is not None:
            chosen.append((str(value), value, value))
            notes.append(f"label {value} is absent from both images (reported as both_empty)")
        else:
            unknown.append(item)
    if unknown:
        available = ", ".join(p[0] for p in pairs) or "none"
        raise ValueError(f"unknown structure(s) {', '.join(unknown)}; available: {available}")
    return chosen, notes


def _partner(name: str, entries: dict, other: dict):
    """The label of ``name`` in ``entries``; a structure named only by its value keeps that value
    on the side where it is absent (its mask there is simply empty), unless a structure of
    ``entries`` has that value under another name (``None``: one label is never measured twice)."""
    if name in entries:
        return entries[name]
    value = other[name]
    return value if name == str(value) and value not in entries.values() else None


def _as_number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def _contours(reference: LabelImage, reference_label, test: LabelImage, test_label):
    """``(reference polygons, test polygons)`` when both inputs are RT Structure Sets, else None."""
    if not (hasattr(reference, "contours") and hasattr(test, "contours")):
        return None
    return reference.contours.get(reference_label, []), test.contours.get(test_label, [])


def _pair_box(reference: LabelImage, test: LabelImage, ref_label, test_label, whole_image: bool) -> tuple:
    """The stored bounding box (tuple of slices) of a structure pair's voxels in both images (the
    first voxel when both are empty), or the whole image when a selected group depends on its
    extent. The metrics see only this box: each pads its masks itself."""
    if whole_image:
        return tuple(slice(0, n) for n in reference.array.shape)
    boxes = [image.label_box(label) for image, label in ((reference, ref_label), (test, test_label)) if label is not None]
    return union_box(boxes) or tuple(slice(0, 1) for _ in reference.array.shape)


def _mask(image: LabelImage, label, view: Reorientation) -> np.ndarray:
    """The canonical mask of one label within the pair's box (all ``False`` for ``None``). The
    bytes of a one-byte 0/1 image (a boolean mask) are that mask: it is read, not copied, where
    :meth:`Reorientation.mask` can (its voxels keep their storage order)."""
    if label is None:
        return np.zeros(view.array(image.array).shape, dtype=bool)
    if label in image.segment_masks:
        return view.mask(image.segment_masks[label])
    if label == 1 and image.array.dtype.kind in "bu" and image.array.itemsize == 1 and image.labels() == [1]:
        return view.mask(image.array.view(bool))
    return view.mask(image.array, label)


def compare(
    reference,
    test,
    *,
    spacing=None,
    labels=None,
    metrics=None,
    params: Parameters | None = None,
    resample_to: str | None = None,
    threshold: float | None = None,
    progress=None,
    input_policy=None,
    synonyms: dict | None = None,
    image=None,
    contour_resolution_mm: float | None = None,
    keep_surfaces: bool = False,
    names=None,
    dose=None,
) -> ComparisonResult:
    """Compare a test segmentation with a reference, structure by structure.

    Parameters
    ----------
    reference, test : path, LabelImage, SimpleITK.Image or ndarray
        Label maps or binary masks. NumPy arrays need ``spacing`` (mm, array-axis order).
    spacing : tuple of float, optional
        Voxel size in mm in **array-axis order** (``(z, y, x)`` for 3-D), for NumPy inputs only.
    labels : iterable, optional
        Label values or structure names to evaluate; default all non-zero labels of either image.
        Only the selected structures (and their partners) decide whether a grid may crop them
        (resampling, contours outside an ``image`` grid): others are never measured.
    metrics : str or list, optional
        Metric or group names (see :func:`segmetrics.registry.metric_specs`); default all.
    params : Parameters or dict, optional
        Metric parameters (HD percentile, NSD tolerance in mm, MSI levels, ...); a dict of
        :class:`Parameters` fields is checked the same way (:class:`ParameterError` when wrong).
    resample_to : {None, "reference"} or path
        ``"reference"`` resamples the test onto the reference grid (nearest neighbour); a path to
        a DICOM image series folder (or an image file) resamples both onto its grid; otherwise a
        grid mismatch raises :class:`~segmetrics.spatial.geometry.GeometryMismatchError` (grids that
        are one lattice stored in another axis order are compared without resampling). Resampling
        that would discard a whole structure, or fields of view that do not overlap, are refused
        unless ``input_policy.allow_crop`` (:func:`segmetrics.inputs.grids.check_resampling`).
    threshold : float, optional
        Binarise both inputs at ``value >= threshold`` (probability maps); default: integer labels.
    progress : callable, optional
        Called as ``progress(done, total, structure_name)`` after each metric group of each
        structure: ``done`` counts structures, with a fraction while one is under way. A caller
        may raise from it to stop the comparison (e.g. the Slicer module's Cancel).
    input_policy : segmetrics.inputs.io.InputPolicy, optional
        Overrides of the input checks of :mod:`segmetrics.inputs.validation` (lossy pictures, many
        labels, external data files); by default inputs that cannot be trusted are refused with
        :class:`segmetrics.inputs.io.ReadError`.
    synonyms : path or dict, optional
        Structure-name synonyms tried before the built-in rules: a JSON file ``{"Lung_L": ["Lt Lung"]}``,
        the dict of its content, or :func:`segmetrics.inputs.structure_names.synonym_map`'s map.
    image : path, optional
        DICOM series folder (or image file) whose grid RT Structure Sets are rasterised on; see
        :func:`segmetrics.inputs.io.load_pair` for the default grids.
    contour_resolution_mm : float, optional
        Pixel size of a grid built from contour planes (default
        :data:`segmetrics.inputs.readers.rtstruct.DEFAULT_CONTOUR_RESOLUTION_MM`).
    names : dict or path, optional
        ``{label value: name}`` (or a JSON file of it, as ``--names``) for the side(s) whose file
        carries no names of its own (label maps); names an RT Structure Set, DICOM SEG or
        ``.seg.nrrd`` carries are kept (:func:`segmetrics.inputs.io.name_unnamed`).
    keep_surfaces : bool
        Keep each structure's 3-D surfaces in ``extras["surfaces"]`` (:class:`PairSurfaces`), e.g.
        for the Slicer review; off by default, so that results of many structures stay small.
    dose : path or DoseGrid, optional
        The planned dose (RTDOSE file or :class:`segmetrics.inputs.readers.rtdose.DoseGrid`) of the dose
        metrics (:mod:`segmetrics.metrics.dose`; V levels in ``params.dose_levels_gy``); refused
        when its frame of reference is not that of the structure files (in-memory images carry
        none: check the files they came from with :func:`segmetrics.inputs.readers.rtdose.check_dose_frame`).
        A given dose selects the dose group (every ``dose_*`` metric, unless ``metrics`` names some).
        Without it the dose group reports nothing (a note says so when dose metrics were asked for
        by name; ``ValueError`` when nothing else was).

    Raises :class:`NothingToCompareError` when neither image holds a structure and no ``labels``
    were given, and ``ValueError`` for parameters that do not fit the images (e.g. ``msi_axis``).

    The values do not depend on how the grid is stored: both images are measured in one canonical
    storage orientation (:mod:`segmetrics.spatial.orientation`), each structure pair within the bounding
    box of its voxels (labels and boxes are found in one pass per image), while everything that
    refers to the array (``msi_axis``, per-slice MSI rows, surface polydata in ``extras``) stays in
    the stored array's indices and index-scaled frame.
    """
    from ..inputs.grids import check_contours_kept, check_fields_of_view, check_resampled, check_resampling
    from ..inputs.io import load_pair, name_unnamed, read_name_map
    from ..inputs.validation import InputPolicy
    from .provenance import describe_input, grid_info, provenance

    params = as_parameters(params)
    check_evaluation_options(metrics=metrics, labels=labels, resample_to=resample_to)  # load_pair checks the others
    selection = selected_groups(metrics, dose is not None)
    synonyms = synonym_map(synonyms)  # a file is read before the images
    inputs = {"reference": describe_input(reference), "test": describe_input(test)}
    dose_notes = []
    if dose is not None:
        inputs["dose"] = describe_input(dose)
        dose, dose_notes = load_dose(dose, {"reference": reference, "test": test})
    reference, test = load_pair(reference, test, spacing, threshold, input_policy=input_policy, image=image,
                                contour_resolution_mm=contour_resolution_mm, check_crops=False)
    checkpoint()
    params.check_dimension(reference.ndim)
    notes = getattr(reference, "notes", []) + getattr(test, "notes", [])
    if names is not None:
        source, mapping = ("name map", names) if isinstance(names, dict) else (str(names), read_name_map(names))
        reference, test, named = name_unnamed(reference, test, mapping, source)
        notes += named
    # paired on the grids as given: only the selected structures decide whether a grid may crop them
    pairs, pairing_notes = _structure_pairs(reference, test, labels, synonyms)
    if not pairs:
        raise NothingToCompareError("nothing to compare: neither image holds a structure (every voxel is 0 and no "
                                    "segment is named); pass labels (CLI: --labels 1) to report them as both_empty")
    selected = {"reference": None, "test": None} if labels is None else {  # None: every structure
        "reference": [r for _, r, _ in pairs if r is not None], "test": [t for _, _, t in pairs if t is not None]}
    allow_crop = (input_policy or InputPolicy()).allow_crop
    if not allow_crop:
        check_contours_kept(reference, test, [(r, t) for _, r, t in pairs])
    if resample_to == "reference":
        differences = geometry_differences(reference, test)
        if differences:
            notes.append("test resampled onto the reference grid (nearest neighbour): " + "; ".join(differences))
            notes += check_resampling(test, reference, "test", "reference", allow_crop, selected["test"])
            resampled = resample_nearest(test, reference)
            notes += check_resampled(test, resampled, "test", "reference", allow_crop, selected["test"])
            test = resampled
    elif resample_to is not None:  # an image (e.g. a DICOM series folder) whose grid both go onto
        from ..inputs.readers import read_image_grid

        grid = read_image_grid(resample_to, input_policy)
        notes.append(f"reference and test resampled onto the grid of {resample_to} (nearest neighbour)")
        images = {"reference": reference, "test": test}
        for side, image in images.items():
            notes += check_resampling(image, grid, side, str(resample_to), allow_crop, selected[side])
            images[side] = resample_nearest(image, grid)
            notes += check_resampled(image, images[side], side, str(resample_to), allow_crop, selected[side])
        reference, test = images["reference"], images["test"]
    check_fields_of_view(reference, test)
    check_same_geometry(reference, test)
    orientation = canonical(reference)  # metrics must not depend on how the grid is stored
    checkpoint()

    if dose is None and "dose" in selection and metrics not in (None, "all", ["all"]):  # asked for by name
        if len(selection) == 1:
            raise ValueError("the dose metrics need the planned dose: give dose= (CLI: --dose RTDOSE.dcm)")
        notes.append("dose metrics skipped: no dose was given (dose=, CLI: --dose RTDOSE.dcm)")
    if dose is not None:
        from ..metrics.dose import sampling_notes  # a metric group module: imported when it runs

        notes += [*dose_notes, *sampling_notes(dose, reference.spacing)]
    groups = all_groups()
    whole_image = any(groups[name].whole_image(params) for name in selection)
    checkpoint()
    notes += pairing_notes
    results = []
    for index, (name, ref_label, test_label) in enumerate(pairs):
        checkpoint()
        view = orientation.within(_pair_box(reference, test, ref_label, test_label, whole_image))
        grid = view.image(reference)
        pair = StructurePair(
            name=name,
            reference=_mask(reference, ref_label, view),
            test=_mask(test, test_label, view),
            spacing=grid.spacing,
            image=grid,
            orientation=view,
            contours=_contours(reference, ref_label, test, test_label),
            dose=dose,
        )
        values = []
        for position, (group_name, wanted) in enumerate(selection.items(), start=1):
            checkpoint()
            wanted = wanted | {spec.name for spec in groups[group_name].level_metrics(params)}
            computed = groups[group_name].compute(pair, params)
            values += [v for v in computed if v.metric in wanted]
            if progress is not None:
                progress(index + position / len(selection), len(pairs), name)
        extras = view.surfaces_to_stored(pair.extras, grid.spacing)
        if keep_surfaces and pair.reference.ndim == 3 and ("surface", "test") in pair.cache:  # built by segmetrics.spatial.mesh.cached_surface
            kept = [pair.cache[("surface", side)] for side in ("reference", "test")]  # without their search structures:
            kept = [None if surface is None else replace(surface) for surface in kept]  # results hold less memory
            extras["surfaces"] = PairSurfaces(*kept, view, grid.spacing)
        results.append(StructureResult(name, ref_label, test_label, values, extras))
    if dose is not None:
        from ..metrics.dose import outside_notes

        notes += outside_notes(results, dose)
    settings = {"metrics": metrics if metrics is None or isinstance(metrics, str) else list(metrics),
                "labels": None if labels is None else [str(x) for x in labels], "params": params,
                "resample_to": resample_to, "threshold": threshold, "input_policy": input_policy,
                "dose": None if dose is None else dose.source}
    return ComparisonResult(results, notes, params,
                            provenance(inputs, settings, grid=grid_info(reference)))


__all__ = ["compare", "ComparisonResult", "PairSurfaces", "StructureResult", "NothingToCompareError", "Parameters", "Status"]
