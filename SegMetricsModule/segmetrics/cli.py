"""Command line: argument parsing only; the work is done by compare / frames / batch / demo."""
from __future__ import annotations

import argparse
import sys

from . import __version__


class UserError(Exception):
    """An input problem reported as one line, without a traceback."""


def _add_compare_parser(subparsers) -> None:
    p = subparsers.add_parser("compare", help="compare a test segmentation with a reference, per structure")
    p.add_argument("reference", help="reference label map or mask (NRRD, NIfTI, MHA, .seg.nrrd, PNG)")
    p.add_argument("test", help="test label map or mask, same grid as the reference")
    p.add_argument("--labels", help="comma-separated label values or structure names (default: all)")
    p.add_argument("--threshold", type=float, help="binarise both inputs at value >= THRESHOLD (probability maps)")
    p.add_argument("--names", metavar="JSON", help='JSON file mapping label values to names, e.g. {"1": "liver"}')
    p.add_argument("--metrics", default="all", help="comma-separated metric or group names (default: all)")
    p.add_argument("--hd-percentile", type=float, default=95.0, help="percentile of the robust Hausdorff (default 95)")
    p.add_argument("--hd-variant", default="max_of_directed", choices=["max_of_directed", "pooled", "mean_of_directed"],
                   help="how the two directed percentiles combine (default max_of_directed)")
    p.add_argument("--nsd-tolerance", type=float, default=2.0, metavar="MM", help="NSD tolerance in mm (default 2)")
    p.add_argument("--surface-mode", default="exact", choices=["exact", "deepmind"],
                   help="surface elements: exact sub-voxel mesh (default) or DeepMind surfels")
    p.add_argument("--msi-il", type=float, default=1.0, help="MSI penalty level inside the reference (default 1)")
    p.add_argument("--msi-ol", type=float, default=1.0, help="MSI penalty level outside the reference (default 1)")
    p.add_argument("--msi-axis", type=int, default=0, help="array axis of the MSI slices (default 0 = z of (z, y, x))")
    p.add_argument("--msi-convention", default="default", choices=["default", "fda"])
    p.add_argument("--msi-slices", metavar="CSV", help="write the per-slice MSI table to this CSV")
    p.add_argument("--roughness-window", type=float, metavar="MM", help="roughness window radius in mm")
    p.add_argument("--roughness-convention", default="default", choices=["default", "paper"])
    p.add_argument("--resample-to", choices=["reference"], help="resample the test onto the reference grid (nearest)")
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(run=_run_compare)


def _parameters(args):
    from .registry import Parameters

    return Parameters(
        hd_percentile=args.hd_percentile,
        hd_percentile_variant=args.hd_variant,
        nsd_tolerance_mm=args.nsd_tolerance,
        surface_mode=args.surface_mode,
        msi_il=args.msi_il,
        msi_ol=args.msi_ol,
        msi_axis=args.msi_axis,
        msi_convention=args.msi_convention,
        roughness_window_mm=args.roughness_window,
        roughness_convention=args.roughness_convention,
    )


def _run_compare(args) -> int:
    from .compare import compare
    from .io import load_label_image, read_name_map
    from .output import write_msi_slices, write_result

    reference = load_label_image(args.reference, threshold=args.threshold)
    test = load_label_image(args.test, threshold=args.threshold)
    if args.names:
        names = read_name_map(args.names)
        reference.names, test.names = dict(names), dict(names)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    result = compare(reference, test, labels=labels, metrics=args.metrics, params=_parameters(args),
                     resample_to=args.resample_to)
    write_result(result, args.format, args.output)
    if args.msi_slices:
        write_msi_slices(result, args.msi_slices)
    return 0


def _add_frames_parser(subparsers) -> None:
    """Owned by the frames/instances work (issue 5)."""


def _run_frames(args) -> int:
    """Owned by the frames/instances work (issue 5)."""
    raise NotImplementedError


def _add_batch_parser(subparsers) -> None:
    """Owned by the batch work (issue 7)."""


def _run_batch(args) -> int:
    """Owned by the batch work (issue 7)."""
    raise NotImplementedError


def _add_demo_parser(subparsers) -> None:
    """Owned by the demo work (issue 7)."""


def _run_demo(args) -> int:
    """Owned by the demo work (issue 7)."""
    raise NotImplementedError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="segmetrics", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"segmetrics {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_compare_parser(subparsers)
    _add_frames_parser(subparsers)
    _add_batch_parser(subparsers)
    _add_demo_parser(subparsers)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``segmetrics`` command; bad input gives one line on stderr and exit 2."""
    from .geometry import GeometryMismatchError
    from .io import ReadError

    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UserError, GeometryMismatchError, ReadError, ValueError, FileNotFoundError) as error:
        print(f"segmetrics {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
