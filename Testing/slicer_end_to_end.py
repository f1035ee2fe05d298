"""End-to-end run of the Slicer module logic on a headless slicer-core scene.

Loads two label maps (segmetrics.inputs.io, as the CLI reads them), makes segmentation nodes of them, runs the
comparison with every registered metric group, and writes into OUTPUT_DIR:
``results.csv`` (the results table node, saved by Slicer's table storage node), ``msi_slices.csv``
(per-slice MSI tables, when MSI ran), ``surface.png`` (offscreen 3-D render of both surfaces) and
``slice_view.png`` (the first pair's worst MSI slice in a slice view, centred as "Show worst slice"
does, with both contours coloured by the signed distance and the colour legend).

    python Testing/slicer_end_to_end.py OUTPUT_DIR [--reference REF.nii.gz --test TEST.nii.gz] [--structure NAME]

Defaults: the Spinal Cord Toolbox t2 cord masks of ../shared/data (2016 manual vs deepseg 2-D).
"""
import argparse
import csv
import os
import sys
from pathlib import Path

import slicer

from segmetrics import mrml
from segmetrics.inputs.io import load_label_image
from segmetrics.registry import all_groups

DATA = Path(os.environ.get("SEGMETRICS_TEST_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
REFERENCE = DATA / "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz"
TEST = DATA / "sct_testing_data/t2/t2_seg-deepseg_sc-2d.nii.gz"


def load_segmentation(scene, path: Path, name: str, structure: str):
    """Read a label map file and turn label 1 into segment ``structure``.

    segmetrics.io is used rather than Slicer's volume reader, which reverses the slice axis of
    images with a left-handed index frame (the SCT t2 masks): the CLI and this script then see the
    same voxel arrays.
    """
    image = load_label_image(path)
    image.names = {1: structure}
    return mrml.add_segmentation_from_label_image(scene, image, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--test", type=Path, default=TEST)
    parser.add_argument("--structure", default="spinal cord", help="segment name given to label 1")
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)

    headless = mrml.create_headless_scene()
    scene = headless.scene
    reference = load_segmentation(scene, args.reference, "reference", args.structure)
    test = load_segmentation(scene, args.test, "test", args.structure)
    groups = list(all_groups())
    outputs = mrml.run(reference, test, metrics=groups, progress=lambda f, m: print(f"{f:4.0%} {m}", file=sys.stderr))

    storage = slicer.vtkMRMLTableStorageNode()
    storage.SetFileName(str(args.output_dir / "results.csv"))
    if not storage.WriteData(outputs.table):
        raise RuntimeError("could not write results.csv")
    rows = [{"structure": name, **row}
            for name, structure in ((s.structure, s) for s in outputs.result.structures)
            for row in mrml.slice_rows(structure)]
    if rows:
        with open(args.output_dir / "msi_slices.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    if outputs.models:
        mrml.render_png(scene, headless.app_logic, args.output_dir / "surface.png")
    structure = outputs.result.structures[0]
    view = mrml.worst_slice_view(outputs, structure.structure)
    if view is not None:
        mrml.render_slice_png(scene, headless.app_logic, args.output_dir / "slice_view.png", *view)
        index, msi = mrml.worst_slice(structure)
        print(f"worst slice of {structure.structure}: {index} (MSI {msi:.3f}), {view[1]} view")
    print(f"metric groups: {', '.join(groups)}; notes: {'; '.join(outputs.result.notes)}")
    print(f"wrote {', '.join(sorted(p.name for p in args.output_dir.iterdir()))} to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
