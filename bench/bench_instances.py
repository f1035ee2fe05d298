"""Time SegMetrics' COCO mask AP against pycocotools on the axon SEM image (run once, by hand).

    python bench/bench_instances.py [--repeat 3]

The ground truth is the axon mask's connected components (~580); the "prediction" is the
deterministic perturbation used by the tests (eroded, dilated, shifted, dropped components and
false positives, tied scores). A 2 x 2 tiling of the same image gives a ~2300-instance frame.
Both tools get identical instances; pycocotools gets them as RLE (encoding timed separately).
Prints best-of-N wall times and the ratio pycocotools / ours, measured in the same run. Ours is
timed through the package's public functions (``segmetrics.average_precision``,
``segmetrics.instances_from_semantic``); ``compare`` does not compute instance metrics.

Connected components (``segmetrics.metrics.instances.connected_components``, scipy only) are also
timed against scikit-image's ``label`` (when installed), in the same run, on the axon image, the
3-D brain-lesion masks (binary, 26-connected) and the 3-D spine instance map (many values).
"""
import argparse
import contextlib
import io
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "Testing"))

from common import best_time  # noqa: E402
from test_instances import coco_evaluator, perturbed_prediction  # noqa: E402

from segmetrics import average_precision, instances_from_semantic  # noqa: E402  (the public API)
from segmetrics.metrics.instances import Instances, connected_components  # noqa: E402
from segmetrics.inputs.io import load_label_image  # noqa: E402

DATA = HERE.parent.parent / "shared" / "data"
AXONS = DATA / "ivadomed_axondeepseg_sem" / "sub-rat3_ses-01_sample-data9_SEM_seg-axon-manual.png"
LESIONS = DATA / "metricsreloaded_brain_lesions" / "Ref" / "CorrectLesion_0002_01_Ref.nii.gz"
SPINE = DATA / "panoptica_spine" / "matched_instance" / "ref.nii.gz"


def bench(semantic, repeat, label):
    gt, dt = perturbed_prediction(semantic, seed=1)
    dt_map = (dt.labels > 0).astype(np.uint8)  # the prediction as a semantic mask

    def ours_end_to_end():
        gt_i = instances_from_semantic(semantic, connectivity=1)
        dt_i = instances_from_semantic(dt_map, connectivity=1)
        return average_precision([(gt_i, Instances(dt_i.labels, dt_i.ids, dt_i.classes, dt.scores))], [1])

    ours_ap, ours = best_time(lambda: average_precision([(gt, dt)], [1]), repeat)
    ours_all, _ = best_time(ours_end_to_end, repeat)
    encode, evaluator = best_time(lambda: coco_evaluator([(gt, dt)], [1]), 1)

    def coco_run():
        with contextlib.redirect_stdout(io.StringIO()):
            evaluator.evaluate()
            evaluator.accumulate()
        return evaluator.eval["precision"][:, :, 0, 0, 0]

    coco_time, coco = best_time(coco_run, repeat)
    difference = np.nanmax(np.abs(ours.precision[:, :, 0] - coco))
    print(f"{label}: {len(gt)} gt / {len(dt)} predicted instances, image {semantic.shape}")
    print(f"  ours AP (instances given)          {ours_ap * 1e3:8.1f} ms")
    print(f"  ours incl. connected components    {ours_all * 1e3:8.1f} ms")
    print(f"  pycocotools evaluate+accumulate    {coco_time * 1e3:8.1f} ms  (RLE encoding + COCO setup {encode * 1e3:.0f} ms more)")
    print(f"  ratio pycocotools / ours (AP only)  {coco_time / ours_ap:8.1f} x")
    print(f"  max |precision difference|          {difference:.1e}; map50 {ours.map50:.4f}, map50_95 {ours.map50_95:.4f}")


def bench_components(label_map, repeat, label):
    """Best wall time of connected_components against skimage.measure.label (full connectivity)."""
    ours_time, (components, count) = best_time(lambda: connected_components(label_map, label_map.ndim), repeat)
    line = f"{label}: {count} components of {label_map.shape}; ours {ours_time * 1e3:8.1f} ms"
    try:
        from skimage.measure import label as skimage_label
    except ImportError:
        print(line + " (scikit-image not installed)")
        return
    theirs_time, theirs = best_time(lambda: skimage_label(label_map, background=0, connectivity=label_map.ndim), repeat)
    same = "same numbers" if np.array_equal(components, theirs) else "same components, numbered otherwise"
    print(line + f", scikit-image {theirs_time * 1e3:8.1f} ms, ratio ours / scikit-image {ours_time / theirs_time:5.2f} ({same})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    semantic = (load_label_image(AXONS).array > 0).astype(np.uint8)
    bench(semantic, args.repeat, "axon image")
    bench(np.tile(semantic, (2, 2)), args.repeat, "axon image tiled 2 x 2")
    bench_components(semantic, args.repeat, "axon image")
    bench_components(load_label_image(LESIONS, threshold=0.5).array.astype(bool), args.repeat, "brain lesions")
    bench_components(load_label_image(SPINE).array, args.repeat, "spine instances")


if __name__ == "__main__":
    main()
