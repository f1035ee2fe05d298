"""Command line: argument parsing only; the work is done by compare / frames / batch / demo."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys
from pathlib import Path

from ._version import __version__


class UserError(Exception):
    """An input problem reported as one line, without a traceback."""


#: Command-line flag -> ``Parameters`` field; flags left out keep the ``Parameters`` defaults.
PARAMETER_FLAGS = {
    "hd_percentile": "hd_percentile",
    "hd_variant": "hd_percentile_variant",
    "nsd_tolerance": "nsd_tolerance_mm",
    "surface_mode": "surface_mode",
    "msi_il": "msi_il",
    "msi_ol": "msi_ol",
    "msi_axis": "msi_axis",
    "msi_convention": "msi_convention",
    "msi_units": "msi_units",
    "msi_align": "msi_align",
    "roughness_window": "roughness_window_mm",
    "roughness_convention": "roughness_convention",
    "apl_tolerance": "apl_tolerance_mm",
    "dose_levels": "dose_levels_gy",
}


#: ``--msi-preset`` choices (the levels are ``segmetrics.registry.MSI_PRESETS``, not imported for the help).
MSI_PRESET_HELP = {"default": "il 1, ol 1 (σ 10 mm inside and outside; the MSI paper and FDA MISS-tool default)",
                   "tight": "il 1, ol 10 (σ 10 mm inside, 1 mm outside; the MSI paper's clinical example)"}


def _add_parameter_arguments(p) -> None:
    """Metric-parameter flags shared by ``compare`` and ``batch`` (defaults: ``segmetrics.Parameters``)."""
    p.add_argument("--params", metavar="JSON", help="metric parameters as a JSON object given inline "
                                                     "or a file holding one (segmetrics.Parameters fields, "
                                                     'e.g. \'{"hd_percentile": 90}\'); the flags below override it')
    p.add_argument("--hd-percentile", type=float, help="percentile of the robust Hausdorff hdp_mm (default 95)")
    p.add_argument("--hd-variant", choices=["max_of_directed", "pooled", "mean_of_directed"],
                   help="how the two directed percentiles combine (default max_of_directed)")
    p.add_argument("--nsd-tolerance", type=float, metavar="MM", help="NSD tolerance in mm (default 2)")
    p.add_argument("--surface-mode", choices=["exact", "deepmind"],
                   help="surface elements: exact sub-voxel mesh (default) or DeepMind surfels")
    p.add_argument("--msi-il", type=float, help="MSI penalty level inside the reference, Gaussian width "
                                                 "σ = 10/level mm (default 1)")
    p.add_argument("--msi-ol", type=float, help="MSI penalty level outside the reference (default 1)")
    p.add_argument("--msi-preset", choices=list(MSI_PRESET_HELP),
                   help="named MSI levels instead of --msi-il/--msi-ol: " + "; ".join(
                       f"{name}: {text}" for name, text in MSI_PRESET_HELP.items()))
    p.add_argument("--msi-axis", type=int,
                   help="array axis of the MSI slices, 0 = z of (z, y, x) (default: the axis with the largest spacing)")
    p.add_argument("--msi-convention", choices=["default", "fda"],
                   help="default (ours, mm) or fda (US FDA MISS-tool compatible, pixels)")
    p.add_argument("--msi-units", choices=["mm", "pixel"], help="MSI distances in mm (default) or pixels")
    p.add_argument("--msi-align", choices=["none", "com"],
                   help="align centres of mass only to pair contours (distances stay in place; default none)")
    p.add_argument("--roughness-window", type=float, metavar="MM",
                   help="roughness window radius in mm (tile side in voxels with --roughness-convention paper)")
    p.add_argument("--roughness-convention", choices=["default", "paper"])
    p.add_argument("--apl-tolerance", type=float, metavar="MM",
                   help="added path length: reference contour farther than this from the test counts (default 1)")
    p.add_argument("--dose-levels", metavar="GY,GY",
                   help="doses of the V metrics of the dose group (volume receiving at least each), e.g. 20,30Gy")


def _add_input_arguments(p) -> None:
    """Overrides of the input checks (``segmetrics.inputs.io.InputPolicy``), shared by compare, frames and batch."""
    p.add_argument("--allow-lossy", action="store_true",
                   help="accept lossy JPEG masks (refused by default: compression adds grey levels); needs --threshold")
    p.add_argument("--allow-many-labels", action="store_true",
                   help="accept label maps refused as likely intensity images (negative values, more than 500 "
                        "labels, noisy values) or grey pictures")
    p.add_argument("--allow-external-data", action="store_true",
                   help="accept .mhd/.nhdr headers whose data file lies outside the header's folder")
    p.add_argument("--assume-unit-spacing", action="store_true",
                   help="accept NRRD/MetaImage files that state no voxel size, as 1 mm voxels (results in voxel units)")
    p.add_argument("--allow-crop", action="store_true",
                   help="accept losing structures to a grid: contours outside the --image grid, resampling that "
                        "discards a whole structure or onto a field of view that does not overlap (a warning says "
                        "what was lost)")


def _input_policy(args):
    """``InputPolicy`` from the ``--allow-*`` flags."""
    from .inputs.validation import InputPolicy

    if args.allow_lossy and args.threshold is None:
        raise UserError("--allow-lossy needs --threshold (e.g. --threshold 128 for 0/255 JPEG masks)")
    return InputPolicy(args.allow_lossy, args.allow_many_labels, args.allow_external_data, args.assume_unit_spacing,
                       args.allow_crop)


def _parameters(args):
    """``Parameters`` from ``--params`` (inline JSON when it starts with ``{``, else a JSON file),
    then the flags that were given."""
    import json
    from dataclasses import fields

    from .registry import MSI_PRESETS, ParameterError, Parameters, parse_dose_levels

    values = {}
    if args.params:
        try:
            inline = args.params.lstrip().startswith("{")
            values = json.loads(args.params if inline else Path(args.params).read_text())
        except (OSError, ValueError) as error:
            raise UserError(f"--params {args.params}: {_one_line(error)}") from error
        known = {f.name for f in fields(Parameters)}
        if not isinstance(values, dict) or set(values) - known:
            raise UserError(f"--params {args.params}: expected a JSON object with keys among {', '.join(sorted(known))}")
    if args.msi_preset:
        if args.msi_il is not None or args.msi_ol is not None or {"msi_il", "msi_ol"} & set(values):
            raise UserError(f"--msi-preset {args.msi_preset} sets the MSI levels: leave out --msi-il and --msi-ol "
                            "(and msi_il, msi_ol in --params), or the preset")
        values.update(zip(("msi_il", "msi_ol"), MSI_PRESETS[args.msi_preset]))
    values.update({field: getattr(args, flag) for flag, field in PARAMETER_FLAGS.items() if getattr(args, flag) is not None})
    if args.dose_levels is not None:
        try:
            values["dose_levels_gy"] = parse_dose_levels(args.dose_levels)
        except ParameterError as error:
            raise UserError(f"--dose-levels {args.dose_levels}: {error}") from None
    return Parameters(**values)


def _add_compare_parser(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare a test segmentation with a reference, per structure")
    p.add_argument("reference", help="reference label map or mask (NRRD, NIfTI, MHA, .seg.nrrd, PNG, DICOM RTSTRUCT "
                   "or SEG)")
    p.add_argument("test", help="test label map or mask, same grid as the reference (or an RTSTRUCT)")
    p.add_argument("--image", metavar="DIR", help="DICOM image series folder (or image file) to rasterise RT "
                   "structure sets on (default: the other input's grid, else a grid from the contour planes)")
    p.add_argument("--contour-resolution", type=float, metavar="MM",
                   help="pixel size of a grid built from contour planes (default 1 mm)")
    p.add_argument("--synonyms", metavar="JSON", help='structure name synonyms, e.g. {"Lung_L": ["Lt Lung"]}; names '
                   "also match ignoring case and separators")
    p.add_argument("--labels", help="comma-separated label values or structure names (default: all)")
    p.add_argument("--threshold", type=float, help="binarise both inputs at value >= THRESHOLD (probability maps)")
    p.add_argument("--names", metavar="JSON", help='JSON file mapping label values to names, e.g. {"1": "liver"} '
                   "(or a .csv of label,name rows), for the input(s) without names of their own (label maps); names "
                   "an RTSTRUCT, SEG or .seg.nrrd carries are kept")
    p.add_argument("--metrics", help="comma-separated metric or group names, or all (default: every group but "
                                      "lesions, which --metrics lesions adds)")
    _add_parameter_arguments(p)
    _add_input_arguments(p)
    p.add_argument("--dose", metavar="RTDOSE", help="planned dose (DICOM RT Dose) for the dose metrics (dose group): "
                   "DVH statistics of reference and test and their difference; a given dose selects the dose group "
                   "beside --metrics")
    p.add_argument("--dvh", metavar="CSV", help="write the cumulative DVHs (dose, volume in cc and %% of reference "
                   "and test, per structure) to this CSV; needs --dose")
    p.add_argument("--slices", "--msi-slices", metavar="CSV", dest="slices",
                   help="write the per-slice table (MSI, added path length, Dice, HD of each slice, per structure) "
                        "to this CSV")
    p.add_argument("--resample-to", metavar="reference|DIR", help="resample the test onto the reference grid, or both "
                   "onto the grid of a DICOM series folder or image file (nearest neighbour)")
    p.add_argument("--format", default="table", choices=["table", "csv", "wide-csv", "json"],
                   help="table (terminal, rounded for display), csv (full precision; with -o the provenance goes "
                        "to FILE.provenance.json), wide-csv (= csv --layout wide) or json (with provenance)")
    p.add_argument("--layout", default="long", choices=["long", "wide"],
                   help="csv layout: long (a row per structure and metric, default) or wide (a row per structure)")
    p.add_argument("--sort", metavar="METRIC", help="structures worst first by METRIC (e.g. dice, hd95_mm), in every format")
    p.add_argument("--wide", action="store_true",
                   help="table: every metric, in several tables that fit the terminal (default: the main metrics "
                        "that fit)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(run=_run_compare)


@contextlib.contextmanager
def _structure_progress():
    """Yield a ``progress(done, total, name)`` callback drawing a transient bar on standard error
    (nothing when standard error is not a terminal, e.g. a log file)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("compare", total=None)
    with bar:
        yield lambda done, total, name: bar.update(task, completed=done, total=total, description=f"compared {name}")


def _run_compare(args) -> int:
    from .evaluation.compare import compare
    from .inputs.io import load_pair, read_name_map
    from .outputs.tables import write_result
    from .outputs.slices import write_slice_table
    from .outputs.dvh import write_dvh_table
    from .inputs.readers.rtdose import load_dose
    from .inputs.structure_names import read_synonyms

    policy = _input_policy(args)
    # the dose is checked against the structure files' frames of reference, then given to compare read
    dose, dose_notes = load_dose(args.dose, {"reference": args.reference, "test": args.test}) if args.dose \
        else (None, [])
    synonyms = read_synonyms(args.synonyms) if args.synonyms else None  # small files first: refused before the images
    if args.names:
        read_name_map(args.names)  # refused before the images are read; compare names the file in its messages
    reference, test = load_pair(args.reference, args.test, threshold=args.threshold, input_policy=policy,
                                image=args.image, contour_resolution_mm=args.contour_resolution,
                                check_crops=False)  # compare refuses crops of the selected structures
    labels = _labels(args)
    with _structure_progress() as progress:
        result = compare(reference, test, labels=labels, metrics=args.metrics, params=_parameters(args),
                         resample_to=args.resample_to, progress=progress, input_policy=policy, synonyms=synonyms,
                         names=Path(args.names) if args.names else None, dose=dose)
    result.notes[:0] = dose_notes
    result.provenance.update(command=args.command_line, inputs=_input_files(
        reference=args.reference, test=args.test, names=args.names, dose=args.dose))
    fmt, layout = ("csv", "wide") if args.format == "wide-csv" else (args.format, args.layout)
    write_result(result, fmt, args.output, layout=layout, sort=args.sort, wide=args.wide)
    if args.slices:
        write_slice_table(result, args.slices)
    if args.dvh:
        write_dvh_table(result, args.dvh)
    return 0


def _input_files(**paths) -> dict:
    """Provenance of the input files given on the command line (``None`` ones left out)."""
    from .evaluation.provenance import file_info

    return {name: file_info(path) for name, path in paths.items() if path is not None}


def _add_frames_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "frames", help="multi-class frame metrics (challenge IoU, ISI-IoU, mcIoU, mDice) and instance AP over two folders",
        description="Score a folder of predicted frames against a folder of reference (ground-truth) frames, paired "
                    "by file name. The reference folder comes FIRST, as in `segmetrics compare REFERENCE TEST`; "
                    "segmetrics 0.1 took the prediction folder first. Positional folders named in that old order are "
                    "refused (the first named like predictions: pred, output, results, ...; the second like "
                    "references: gt, labels, ref, masks, ...); a first folder of probability-like (non-integer) "
                    "frames beside integer labels gets a warning (soft references exist). Folders named with "
                    "--reference/--test are never checked.")
    p.add_argument("reference_dir", nargs="?", help="folder of reference (ground-truth) label maps (PNG, NRRD, NIfTI, "
                                                    "MHA, .npy)")
    p.add_argument("test_dir", nargs="?", help="folder of predicted label maps, paired with the references by file name")
    p.add_argument("--reference", metavar="DIR", help="the reference folder, named (instead of the first positional)")
    p.add_argument("--test", metavar="DIR", help="the prediction folder, named (instead of the second positional)")
    p.add_argument("--classes", metavar="JSON", help='JSON {"1": "LAV", ...}: classes to score and their names '
                   "(default: every non-zero label found; 0 is never scored)")
    p.add_argument("--absent-class", default="ignore", choices=["ignore", "one", "zero"],
                   help="a class absent from both in a frame: ignored (default, ISINet), scored 1, or scored 0 "
                        "so every listed class is averaged (MISAW-Seg)")
    p.add_argument("--empty-frame", default="skip", choices=["skip", "one"],
                   help="a frame empty in both: skipped by challenge/ISI IoU (default) or scored 1")
    p.add_argument("--empty-reference", default="skip", choices=["skip", "zero"],
                   help="a frame with empty ground truth but a prediction: skipped by challenge IoU (default) or 0")
    p.add_argument("--instances", action="store_true",
                   help="also COCO mask AP (map50, map95, map50_95) and detection precision/recall/F1")
    p.add_argument("--connectivity", type=int, help="connected-component connectivity, 1 (faces) .. ndim (corners); default ndim")
    p.add_argument("--instance-dirs", nargs=2, metavar=("REF_INST_DIR", "TEST_INST_DIR"),
                   help="instance label maps instead of connected components (class = majority class of the frame); "
                        "reference folder first")
    p.add_argument("--scores", metavar="PATH", help="instance scores: folder of probability maps paired by name "
                   "(mean inside each instance) or JSON/CSV (frame,instance,score); default 1, ties in file-name order")
    p.add_argument("--detection-iou", type=float, help="IoU threshold of the detection counts (default 0.5)")
    p.add_argument("--size-edges", metavar="MM,MM",
                   help="equivalent diameters between small, medium and large instances for the detection counts "
                        "per size (default 3,10 mm; PNG and .npy pixels count as 1 mm)")
    p.add_argument("--threshold", type=float, help="binarise every frame at this value (>= -> class 1), e.g. 0.5 "
                   "for probability maps")
    _add_input_arguments(p)
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(run=_run_frames)


def _numbers(flag: str, text: str) -> list:
    """Comma-separated numbers of an option, or :class:`UserError` naming it."""
    try:
        return [float(item) for item in text.split(",")]
    except ValueError:
        raise UserError(f"{flag} expects comma-separated numbers, e.g. 3,10; got {text!r}") from None


def _frame_folders(args) -> tuple:
    """``(reference_dir, test_dir)`` of ``frames`` from the positionals (reference first) or the named options."""
    named = [args.reference, args.test]
    positional = [folder for folder in (args.reference_dir, args.test_dir) if folder is not None]
    if any(named) and positional:
        raise UserError("give the folders either as positionals (REFERENCE_DIR TEST_DIR) or as --reference/--test, "
                        "not both")
    folders = named if any(named) else [args.reference_dir, args.test_dir]
    if None in folders:
        raise UserError("frames needs two folders: REFERENCE_DIR TEST_DIR (reference first), or --reference DIR "
                        "--test DIR")
    return tuple(folders)


def _run_frames(args) -> int:
    from .evaluation.frames import DETECTION_IOU, EdgeRules, evaluate_folders, swapped_by_content, swapped_by_name, write_frame_result
    from .inputs.io import read_name_map
    from .registry import ParameterError, Parameters

    reference_dir, test_dir = _frame_folders(args)
    if not (args.reference or args.test):  # positional folders: catch scripts written for the old order
        order = ("frames takes the reference folder FIRST (REFERENCE_DIR TEST_DIR, as compare; segmetrics 0.1 took "
                 "the prediction first)")
        reason = swapped_by_name(reference_dir, test_dir)
        if reason:
            raise UserError(f"the folders look swapped: {reason}. {order}: swap them, or name them with "
                            "--reference DIR --test DIR to go on")
        reason = swapped_by_content(reference_dir, test_dir)
        if reason:
            print(f"warning: the folders may be swapped: {reason}. {order}; name them with --reference/--test to "
                  "silence this", file=sys.stderr)
    size_edges = None if args.size_edges is None else _numbers("--size-edges", args.size_edges)
    if size_edges is not None:
        try:
            Parameters(lesion_size_edges_mm=size_edges)
        except ParameterError as error:
            raise UserError(f"--size-edges {args.size_edges}: {error}") from None
    rules = EdgeRules(args.absent_class, args.empty_frame, args.empty_reference)
    result = evaluate_folders(
        test_dir, reference_dir, classes=read_name_map(args.classes) if args.classes else None,
        rules=rules, instances=args.instances or bool(args.instance_dirs or args.scores),
        connectivity=args.connectivity, scores=args.scores,
        detection_iou=DETECTION_IOU if args.detection_iou is None else args.detection_iou,
        instance_dirs=args.instance_dirs and args.instance_dirs[::-1], threshold=args.threshold, input_policy=_input_policy(args),
        size_edges_mm=size_edges,
    )
    write_frame_result(result, args.format, args.output)
    return 0


def _add_batch_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "batch", help="evaluate many cases (resumable, parallel or on Dask) and write records and a report",
        description="Evaluate every case of a manifest or of two folders; results are appended per case to "
                    "OUTPUT/results.csv and results.jsonl; re-running the command resumes (finished cases are "
                    "skipped, failed ones retried). Exit status 1 when a case failed.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", metavar="CSV",
                        help="CSV with columns case_id, reference, test and optional names (label map JSON) and "
                             "dose (RT Dose file of the case: selects the dose metrics for that case)")
    source.add_argument("--reference-dir", metavar="DIR", help="folder of references, matched to --test-dir by file "
                        "name; folders of DICOM files (any nesting) by patient and frame of reference, on the "
                        "referenced image series")
    p.add_argument("--test-dir", metavar="DIR", help="folder of test segmentations (with --reference-dir)")
    p.add_argument("--names", metavar="JSON", help='label value -> name map for folder mode, e.g. {"1": "liver"} (or a .csv of '
                   "label,name rows)")
    p.add_argument("--synonyms", metavar="JSON", help='structure name synonyms for every case, e.g. {"Lung_L": '
                   '["Lt Lung"]}: pair reference and test structures before the built-in TG-263 rules; other '
                   "synonyms when resuming redo every case")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder of the results (resumed if present)")
    p.add_argument("--labels", help="comma-separated label values or structure names (default: all)")
    p.add_argument("--metrics", help="comma-separated metric or group names, or all (default: every group but "
                                      "lesions, which --metrics lesions adds)")
    _add_parameter_arguments(p)
    p.add_argument("--resample-to", choices=["reference"], help="resample tests onto the reference grid (nearest)")
    p.add_argument("--threshold", type=float, help="binarise every input at value >= THRESHOLD (probability maps)")
    _add_input_arguments(p)
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1); Dask workers with --scheduler local")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on a Dask cluster: 'local' or a scheduler address "
                                                         "(tcp://host:8786); needs segmetrics[distributed]")
    p.add_argument("--report", metavar="DIR", help="write report.html, report.md, aggregate.csv and figures here")
    p.add_argument("--penalty", default="none", metavar="MM",
                   help="distance counted for a missed structure at aggregation: 'none' (default: statistics over "
                        "the defined values, misses counted beside every mean), a constant in mm (e.g. 373.13 as "
                        "in BraTS) or 'diagonal' (each case's image diagonal; depends on the field of view)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=_run_batch)


def _run_batch(args) -> int:
    import importlib.util

    from .evaluation.batch import Case, case_id_from_filename, match_folders, read_manifest, run_batch
    from .inputs.io import read_name_map
    from .inputs.structure_names import read_synonyms

    if args.names:
        read_name_map(args.names)  # a bad name map is refused before any case runs
    synonyms = read_synonyms(args.synonyms) if args.synonyms else None  # as is a bad synonyms file
    if args.manifest:
        cases, unmatched = read_manifest(args.manifest), {}
    elif not args.test_dir:
        raise UserError("--reference-dir needs --test-dir")
    else:
        cases, unmatched, skipped = match_folders(args.reference_dir, args.test_dir, args.names)
        for side, entries in skipped.items():
            files, folders = [e for e in entries if not e.endswith("/")], [e for e in entries if e.endswith("/")]
            if files:
                print(f"skipped {len(files)} {side} file(s) that are not images: {', '.join(files)}", file=sys.stderr)
            if folders:
                print(f"skipped {len(folders)} {side} subfolder(s), not searched (a folder run reads the files at the "
                      f"top level; list nested files in a manifest): {', '.join(folders)}", file=sys.stderr)
    for side, files in unmatched.items():
        if files:
            print(f"unmatched {side} files ({len(files)}): {', '.join(files)}", file=sys.stderr)
    # a reference without a test file is a case of the dataset: counted as not run, never silently left out
    cases = sorted(cases + [Case(case_id_from_filename(name), str(Path(args.reference_dir) / name), "", args.names,
                                 not_run=f"no test file of this case in {args.test_dir}")
                            for name in unmatched.get("reference", [])], key=lambda case: case.case_id)
    for case in cases:
        if case.not_run:
            print(f"not run {case.case_id}: {case.not_run}", file=sys.stderr)
    itself = [case.case_id for case in cases if case.reference and case.test and _same_file(case.reference, case.test)]
    if itself:
        print(f"warning: {len(itself)} case(s) compare a file with itself (reference and test are one file): "
              f"{', '.join(itself[:10])}{' ...' if len(itself) > 10 else ''}", file=sys.stderr)
    if all(case.not_run for case in cases):
        raise UserError("no cases to evaluate")
    if args.scheduler and importlib.util.find_spec("distributed") is None:
        raise UserError("--scheduler needs dask.distributed: pip install 'segmetrics[distributed]'")
    penalty = _penalty(args.penalty)
    params = _parameters(args)
    labels = _labels(args)
    job = {"metrics": args.metrics, "params": params, "resample_to": args.resample_to, "threshold": args.threshold,
           "input_policy": _input_policy(args), "synonyms": synonyms}
    sources = {"manifest": args.manifest} if args.manifest else {
        "reference_dir": args.reference_dir, "test_dir": args.test_dir, "names": args.names}
    sources["synonyms"] = args.synonyms
    summary = run_batch(cases, args.output, labels=labels, workers=args.workers, scheduler=args.scheduler,
                        progress=not args.no_progress, unmatched=unmatched, inputs=sources, **job)
    evaluated = [case_id for case_id in summary.computed if case_id not in summary.failed]
    print(f"{len(summary.cases)} cases: {len(evaluated)} evaluated now, {len(summary.skipped)} already done, "
          f"{len(summary.failed)} failed{f', {len(summary.not_run)} not run' if summary.not_run else ''}; "
          f"results in {summary.output}")
    for case_id, error in summary.failed.items():
        print(f"failed {case_id}: {error}", file=sys.stderr)
    if summary.not_in_manifest:
        others = summary.not_in_manifest
        print(f"left out of the results and the report: {len(others)} cases in {summary.output} that are not in this "
              f"run: {', '.join(others[:10])}{' ...' if len(others) > 10 else ''}", file=sys.stderr)
    if args.report:
        from .report import print_summary, report_batch

        print_summary(*report_batch(summary.output, cases, args.report, penalty=penalty, job=job))
    return summary.exit_code


def _same_file(first: str, second: str) -> bool:
    """Whether two paths name one existing file (``./a`` and ``a``, a symbolic link and its target)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # missing: the case fails reading it
        return False


def _add_demo_parser(subparsers) -> None:
    p = subparsers.add_parser("demo", help="batch + report on built-in real data (slicerio CT chest vs simulated auto-contours)")
    p.add_argument("-o", "--output", default="segmetrics-demo", metavar="DIR", help="output folder (default ./segmetrics-demo)")
    p.add_argument("--cases", type=int, default=3, help="number of simulated auto-contours (default 3)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=_run_demo)


def _run_demo(args) -> int:
    from .demo import run_demo
    from .report import print_summary

    agg, html_path, summary = run_demo(args.output, n_cases=args.cases, workers=args.workers,
                                       progress=not args.no_progress)
    for case_id, error in summary.failed.items():
        print(f"failed {case_id}: {error}", file=sys.stderr)
    print_summary(agg, html_path)
    return summary.exit_code


def _metric_names() -> list:
    """Group and metric names accepted by ``--metrics`` (the built-in groups, without importing them)."""
    from .registry import BUILTIN_METRIC_NAMES

    return [f"{name} ({', '.join(metrics)})" for name, metrics in BUILTIN_METRIC_NAMES.items()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="segmetrics",
        description="Segmentation evaluation: overlap, surface distances (mm), MSI, roughness, frame and "
                    "instance metrics. Arrays are (z, y, x); spacings come from the files, in mm.",
        epilog="metric names: " + ", ".join(_metric_names()),
    )
    parser.add_argument("--version", action="version", version=f"segmetrics {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_compare_parser(subparsers)
    _add_frames_parser(subparsers)
    _add_batch_parser(subparsers)
    _add_demo_parser(subparsers)
    return parser


#: Range of each bounded command-line option (metric parameters are checked by ``Parameters``).
OPTION_RANGES = {
    "workers": (lambda n: n >= 0, ">= 0"),
    "cases": (lambda n: n >= 1, ">= 1"),
    "connectivity": (lambda n: 1 <= n <= 3, "1 (faces) to 3 (corners, 3-D)"),
    "detection_iou": (lambda x: 0 < x <= 1, "in (0, 1]"),
}

#: ``frames`` options of the instance metrics (``--instances``, implied by ``--instance-dirs``/``--scores``).
INSTANCE_OPTIONS = ("connectivity", "detection_iou", "size_edges")

#: Output locations of each command: option -> "file" or "folder".
OUTPUTS = {
    "compare": {"output": "file", "slices": "file", "dvh": "file"},
    "frames": {"output": "file"},
    "batch": {"output": "folder", "report": "folder"},
    "demo": {"output": "folder"},
}


#: Input files and folders of the commands: an output file must never overwrite one of them (nor
#: an existing file inside an input folder), and an output folder must not be an input folder,
#: whatever the path spelling (links, ``./``, ``..``).
INPUTS = {
    "compare": ("reference", "test", "image", "resample_to", "names", "synonyms", "params", "dose"),
    "frames": ("reference_dir", "test_dir", "reference", "test", "classes", "scores", "instance_dirs"),
    "batch": ("reference_dir", "test_dir", "manifest", "synonyms"),
}


def _flag(option: str) -> str:
    """The command-line spelling of an ``args`` attribute, with its ``Parameters`` field if it has one."""
    flag = "--" + option.replace("_", "-")
    return f"{flag} ({PARAMETER_FLAGS[option]})" if option in PARAMETER_FLAGS else flag


def _penalty(text: str):
    """``--penalty``: 'none', a finite distance >= 0 in mm (returned as float) or 'diagonal'."""
    if text in ("diagonal", "none"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise UserError(f"--penalty {text}: expected 'diagonal', 'none' or a distance >= 0 in mm")
    return value


def _labels(args):
    """``--labels`` as a list of label values or structure names (``None``: all structures); an empty
    list or an empty item (``--labels ''``, ``--labels 1,,2``) is refused instead of meaning all."""
    if args.labels is None:
        return None
    labels = [item.strip() for item in args.labels.split(",")]
    if not all(labels):
        raise UserError(f"--labels {args.labels!r}: an empty label; give comma-separated label values or "
                        "structure names, or leave the option out to compare every structure")
    return labels


def check_options(args) -> None:
    """Refuse invalid option values in one line before any work: every number finite, bounded options
    in range, ``--penalty`` valid, ``frames`` instance options only with instances, metric parameters
    accepted by ``Parameters``."""
    for option, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{_flag(option)} {value}: expected a finite number")
        if option in OPTION_RANGES and value is not None and not OPTION_RANGES[option][0](value):
            raise UserError(f"{_flag(option)} {value}: expected a value {OPTION_RANGES[option][1]}")
    if getattr(args, "penalty", None) is not None:
        _penalty(args.penalty)
    if args.command == "frames" and not (args.instances or args.instance_dirs or args.scores):
        given = [_flag(option) for option in INSTANCE_OPTIONS if getattr(args, option) is not None]
        if given:
            raise UserError(f"{', '.join(given)}: only used by the instance metrics; add --instances, or leave "
                            f"{'it' if len(given) == 1 else 'them'} out")
    if hasattr(args, "labels"):
        _labels(args)
    if hasattr(args, "params"):  # compare and batch: Parameters validates the metric parameters
        _parameters(args)
    if hasattr(args, "metrics"):
        from .evaluation.compare import selected_groups

        selection = selected_groups(args.metrics, bool(getattr(args, "dose", None)))  # unknown names: ValueError
        if not selection:
            raise UserError(f"--metrics {args.metrics!r}: no metric selected; give metric or group names")
        if getattr(args, "slices", None) and not {"msi", "contours"} & set(selection):
            raise UserError(f"--slices {args.slices}: the per-slice table comes from the msi and contours groups, "
                            f"and --metrics {args.metrics} selects neither; add msi or contours to --metrics")
        if getattr(args, "dvh", None) and not args.dose:
            raise UserError(f"--dvh {args.dvh}: the DVH curves come from the dose group; give --dose RTDOSE.dcm")
        if getattr(args, "sort", None) and not any(args.sort in names for names in selection.values()):
            raise UserError(f"--sort {args.sort}: not among the selected metrics ({args.metrics or 'the default set'}); "
                            "give a metric name such as dice or hd95_mm")


def check_output_file(path, option: str) -> None:
    """Refuse an output file that cannot be written: a folder, or a parent that is missing or not a folder."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; give a file name")
    if not parent.is_dir():
        problem = "is a file, not a folder" if parent.exists() else "does not exist"
        raise UserError(f"{option} {path}: {parent} {problem}")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise UserError(f"{option} {path}: no permission to write {path if path.exists() else parent}")


def check_output_folder(path, option: str) -> None:
    """Refuse an output folder that is a file or cannot be created (nothing is created here)."""
    path = Path(path)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        where = "" if existing == path else f" ({existing} is a file)"
        raise UserError(f"{option} {path}: not a folder{where}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: no permission to write in {existing}")


def _input_paths(args) -> list:
    """``(option, Path)`` of every input file or folder the command was given (see :data:`INPUTS`);
    ``--params`` only when it names a file (not inline JSON), ``--resample-to`` only when it names an
    image (not the word ``reference``)."""
    found = []
    for option in INPUTS.get(args.command, ()):
        value = getattr(args, option, None)
        for item in value if isinstance(value, list) else [value]:
            inline_json = option == "params" and item and item.lstrip().startswith("{")
            if item and not inline_json and (option, item) != ("resample_to", "reference"):
                found.append((option, Path(item)))
    return found


def check_not_an_input(path, option: str, inputs, folder: bool = False) -> None:
    """Refuse an output file ``path`` that is one of the ``inputs`` (``(option, Path)``) or an
    existing file inside an input folder (writing it would destroy the data being evaluated), or
    an output ``folder`` that is an input folder (its results would be read as cases next time)."""
    path = Path(path)
    if not path.exists():
        return
    for input_option, source in inputs:
        same = source.exists() and os.path.samefile(path, source)
        inside = not folder and source.is_dir() and path.resolve().parent == source.resolve()
        if same or inside:
            where = "is" if same else "is a file in"
            what = input_option.replace("_dir", " folder").replace("_", " ")
            harm = "mix the results with" if folder else "overwrite"
            raise UserError(f"{option} {path}: {where} the {what} input {source}; writing it would {harm} the "
                            f"data being evaluated, give another output {'folder' if folder else 'file'}")


def check_outputs(args) -> None:
    """Check every output location of the command before the work starts (see :data:`OUTPUTS`);
    two output files in one place would overwrite each other, no output file may overwrite an
    input and no output folder may be an input folder (:func:`check_not_an_input`)."""
    seen = {}
    inputs = _input_paths(args)
    for option, kind in OUTPUTS.get(args.command, {}).items():
        path = getattr(args, option, None)
        if path is not None:
            (check_output_file if kind == "file" else check_output_folder)(path, _flag(option))
            check_not_an_input(path, _flag(option), inputs, folder=kind == "folder")
            place = Path(path).resolve()
            if kind == "file" and place in seen:
                raise UserError(f"{_flag(option)} {path}: the same place as {_flag(seen[place])}; "
                                "give each output its own name")
            seen.setdefault(place, option)


def _one_line(error: Exception) -> str:
    """The message of ``error`` on one line; an OS error as ``FILE: reason``."""
    if isinstance(error, OSError) and error.strerror:
        files = [str(f) for f in (error.filename, error.filename2) if f is not None]
        text = ": ".join([" -> ".join(files), error.strerror] if files else [error.strerror])
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def main(argv=None) -> int:
    """Entry point of the ``segmetrics`` command.

    Exit status: 0 done; 1 a batch case failed; 2 bad input, an invalid option or an OS error
    (unwritable output, full disk, a folder given as a file), reported as one line on standard
    error without a traceback (set ``SEGMETRICS_TRACEBACK=1`` to see it); 130 interrupted (Ctrl-C).
    Other exceptions are programming errors and keep their traceback.
    """
    from .inputs.validation import ReadError

    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["segmetrics", *(sys.argv[1:] if argv is None else argv)])
    try:
        check_options(args)
        check_outputs(args)
        return args.run(args)
    except (UserError, ReadError, ValueError, OSError) as error:
        if os.environ.get("SEGMETRICS_TRACEBACK"):
            raise
        print(f"segmetrics {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"segmetrics {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
