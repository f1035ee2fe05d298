"""Instance AP and lesion detection: hand-computed cases and pycocotools on real data."""
import contextlib
import io

import numpy as np
import pytest
from scipy import ndimage

from segmetrics.metrics.instances import (
    IOU_THRESHOLDS,
    Instances,
    average_precision,
    connected_components,
    detection_scores,
    instance_ious,
    instances_from_labels,
    instances_from_semantic,
    scores_from_mapping,
    scores_from_probability,
)



def coco_evaluator(images, class_ids, max_detections=10**6):
    """A pycocotools COCOeval (segm, one area range, no detection limit) for the same instances:
    RLE of Fortran-ordered uint8 masks, iscrowd 0, ids from 1 in input order (skips without pycocotools)."""
    coco_mask = pytest.importorskip("pycocotools.mask")
    COCO = pytest.importorskip("pycocotools.coco").COCO
    COCOeval = pytest.importorskip("pycocotools.cocoeval").COCOeval
    gt_anns, dt_anns = [], []
    for image_id, (gt, dt) in enumerate(images, start=1):
        for anns, inst in ((gt_anns, gt), (dt_anns, dt)):
            for i in range(len(inst)):
                mask = np.asfortranarray((inst.labels == i + 1).astype(np.uint8))
                rle = coco_mask.encode(mask)
                rle["counts"] = rle["counts"].decode("ascii")
                anns.append({
                    "id": len(anns) + 1, "image_id": image_id, "category_id": int(inst.classes[i]),
                    "segmentation": rle, "area": float(mask.sum()), "iscrowd": 0, "score": float(inst.scores[i]),
                    "bbox": list(coco_mask.toBbox(rle)),
                })
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = {
            "images": [{"id": i, "height": gt.labels.shape[0], "width": gt.labels.shape[1]}
                       for i, (gt, _) in enumerate(images, start=1)],
            "annotations": gt_anns,
            "categories": [{"id": int(c)} for c in class_ids],
        }
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes(dt_anns) if dt_anns else COCO()
    evaluator = COCOeval(coco_gt, coco_dt, iouType="segm")
    evaluator.params.maxDets = [max_detections]
    evaluator.params.areaRng = [[0, 1e10]]
    evaluator.params.areaRngLbl = ["all"]
    return evaluator


def coco_precision(images, class_ids):
    """pycocotools' eval["precision"] (T, 101, K) for the same instances, -1 mapped to NaN."""
    evaluator = coco_evaluator(images, class_ids)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator.evaluate()
        evaluator.accumulate()
    precision = evaluator.eval["precision"][:, :, :, 0, 0]
    return np.where(precision < 0, np.nan, precision), evaluator


def assert_matches_coco(images, class_ids):
    ours = average_precision(images, class_ids)
    reference, evaluator = coco_precision(images, class_ids)
    np.testing.assert_allclose(ours.precision, reference, rtol=0, atol=1e-9, equal_nan=True)
    # pycocotools' summarize() hard-codes maxDets=100 for AP@[.5:.95]; average its array the same way.
    coco = evaluator.eval["precision"][:, :, :, 0, 0]
    assert ours.map50_95 == pytest.approx(coco[coco > -1].mean(), abs=1e-9)
    at50 = coco[np.flatnonzero(evaluator.params.iouThrs == 0.5)]
    assert ours.map50 == pytest.approx(at50[at50 > -1].mean(), abs=1e-9)
    return ours


def perturbed_prediction(label_map, seed):
    """A deterministic 2-D 'prediction' from a semantic ground truth: components kept, eroded,
    dilated, shifted or dropped, plus false positives, with varied (often tied) scores."""
    rng = np.random.default_rng(seed)
    gt = instances_from_semantic(label_map, connectivity=1)
    fate = np.r_[-1, rng.integers(0, 5, size=len(gt))][gt.labels]  # 0 keep 1 erode 2 dilate 3 shift 4 drop

    def part(kind):
        return np.where(fate == kind, label_map, 0)

    prediction = part(0)
    eroded = part(1) * ndimage.binary_erosion(part(1) > 0)
    dilated = ndimage.grey_dilation(part(2), size=3)
    shifted = np.roll(part(3), (2, -3), axis=(0, 1))
    for layer in (eroded, dilated, shifted):
        prediction = np.where(prediction == 0, layer, prediction)
    for _ in range(12):  # false positives
        r, c = rng.integers(5, np.array(label_map.shape) - 12)
        prediction[r:r + rng.integers(2, 9), c:c + rng.integers(2, 9)] = rng.choice(gt.classes)
    dt = instances_from_semantic(prediction, connectivity=1)
    scores = np.round(rng.random(len(dt)), 1)  # one decimal: many ties, exercising the tie order
    return gt, Instances(dt.labels, dt.ids, dt.classes, scores)


# ---------------------------------------------------------------- hand-computed small cases


def test_iou_matrix_is_sparse_and_class_aware():
    gt = np.zeros((6, 6), int)
    gt[0:2, 0:2] = 1  # class 1, 4 px
    gt[3:6, 3:6] = 2  # class 2, 9 px
    dt = np.zeros((6, 6), int)
    dt[0:2, 0:3] = 1  # class 1, 6 px, overlaps gt 1 by 4 -> IoU 4/6
    dt[3:6, 3:4] = 1  # class 1 over class-2 gt: different class, no pair
    d, g, iou = instance_ious(instances_from_semantic(gt), instances_from_semantic(dt))
    assert d.tolist() == [0] and g.tolist() == [0]
    assert iou[0] == pytest.approx(4 / 6)


def test_ap_hand_computed():
    # gt: two 1x4 bars; detections: one exact (score .9), one false positive (score .8),
    # one at IoU 4/6 with the second bar (score .7).
    gt = np.zeros((8, 10), int)
    gt[0, 0:4] = 1
    gt[4, 0:4] = 2
    dt = np.zeros((8, 10), int)
    dt[0, 0:4] = 1
    dt[2, 0:4] = 2
    dt[4, 0:7] = 3  # 7 px over the 4-px bar: IoU 4/7
    gts = instances_from_labels(gt)
    dts = scores_from_mapping(instances_from_labels(dt), {1: 0.9, 2: 0.8, 3: 0.7})
    result = average_precision([(gts, dts)])
    # IoU thresholds <= 4/7 (0.50, 0.55): ranks TP, FP, TP -> precision 1, .5, 2/3; recall .5, .5, 1.
    # Envelope: recall <= .5 -> 1, recall in (.5, 1] -> 2/3. 101 points: 51 at 1, 50 at 2/3.
    expected_low = (51 * 1 + 50 * 2 / 3) / 101
    # Higher thresholds: TP, FP, FP -> recall .5 max: 51 points at 1, others 0.
    expected_high = 51 / 101
    ap = result.ap[:, 0]
    assert ap[:2] == pytest.approx([expected_low] * 2)
    assert ap[2:] == pytest.approx([expected_high] * 8)
    assert result.map50 == pytest.approx(expected_low)
    assert result.map95 == pytest.approx(expected_high)
    assert result.map50_95 == pytest.approx((2 * expected_low + 8 * expected_high) / 10)
    assert_matches_coco([(gts, dts)], [1])


def test_class_without_ground_truth_is_nan_and_not_averaged():
    gt = np.zeros((5, 5), int)
    gt[0:2, 0:2] = 1
    pred = gt.copy()
    pred[4, 4] = 2  # class 2 only predicted
    result = average_precision([(instances_from_semantic(gt), instances_from_semantic(pred))])
    assert result.classes == [1, 2]
    assert result.class_ap(0.5)[0] == pytest.approx(1.0)
    assert np.isnan(result.class_ap(0.5)[1])
    assert result.status(1) == "reference_empty"
    assert result.map50 == pytest.approx(1.0)


def test_ground_truth_without_detection_is_zero():
    gt = np.zeros((5, 5), int)
    gt[0:2, 0:2] = 1
    empty = np.zeros_like(gt)
    result = average_precision([(instances_from_semantic(gt), instances_from_semantic(empty))])
    assert result.map50 == 0.0
    assert result.status(0) == "test_empty"


def test_tie_order_is_input_order():
    # Two detections of one gt with equal score: the first (lower id) matches, the second is a FP.
    gt = np.zeros((4, 8), int)
    gt[0:2, 0:4] = 1
    dt = np.zeros((4, 8), int)
    dt[0:2, 0:3] = 1  # IoU 6/8
    dt[0:2, 3:4] = 2  # IoU 2/8, never a match
    gts, dts = instances_from_labels(gt), instances_from_labels(dt)
    result = average_precision([(gts, dts)])
    # TP then FP: AP at 0.5..0.75 is 1 (recall 1 reached at rank 1); above 0.75 it is 0.
    assert result.ap[:, 0].tolist() == [1.0] * 6 + [0.0] * 4
    # Swapping the ids puts the false positive first: precision 0 then 1/2 -> AP 1/2.
    swapped = instances_from_labels(np.where(dt == 1, 2, np.where(dt == 2, 1, 0)))
    assert average_precision([(gts, swapped)]).ap[:, 0].tolist() == [0.5] * 6 + [0.0] * 4


def test_iou_exactly_at_threshold_is_a_match_like_coco():
    # One detection covering two 2-px gts exactly: IoU 0.5 with each, a match at 0.50 only.
    gt = np.zeros((2, 4), int)
    gt[0, 0:2] = 1
    gt[0, 2:4] = 2
    dt = (gt > 0).astype(int)
    gts, dts = instances_from_labels(gt), instances_from_labels(dt)
    result = assert_matches_coco([(gts, dts)], [1])
    assert result.ap[:, 0].tolist() == [51 / 101] + [0.0] * 9


def test_instances_from_labels_with_class_map_and_probability_scores():
    inst = np.array([[1, 1, 0, 7], [1, 3, 0, 7]])
    class_map = np.array([[2, 2, 0, 5], [4, 2, 0, 5]])
    instances = instances_from_labels(inst, class_map)
    assert instances.ids.tolist() == [1, 3, 7]
    assert instances.classes.tolist() == [2, 2, 5]  # instance 1 is 2/3 class 2
    prob = np.array([[0.2, 0.4, 0, 1.0], [0.6, 0.5, 0, 0.0]])
    assert scores_from_probability(instances, prob).scores.tolist() == pytest.approx([0.4, 0.5, 0.5])
    assert instances_from_labels(inst, {1: 4, 3: 4, 7: 1}).classes.tolist() == [4, 4, 1]
    with pytest.raises(ValueError, match="no class"):
        instances_from_labels(inst, {1: 4})


def test_connectivity_is_selectable():
    diagonal = np.eye(4, dtype=int)
    assert len(instances_from_semantic(diagonal, connectivity=1)) == 4
    assert len(instances_from_semantic(diagonal, connectivity=2)) == 1


@pytest.mark.parametrize("seed", range(10))
def test_connected_components_are_numbered_in_raster_order_per_value(seed):
    """Brute force: pixels of one value connected through neighbours of that value (flood fill
    over the structuring element), components numbered by their first pixel in raster order."""
    rng = np.random.default_rng(seed)
    for ndim in (2, 3):
        label_map = rng.integers(0, 4, tuple(rng.integers(1, 7, ndim)))
        for connectivity in range(1, ndim + 1):
            components, count = connected_components(label_map, connectivity)
            offsets = np.argwhere(ndimage.generate_binary_structure(ndim, connectivity)) - 1
            expected, number = np.zeros(label_map.shape, int), 0
            for start in map(tuple, np.argwhere(label_map != 0)):  # raster order
                if expected[start]:
                    continue
                number += 1
                expected[start], stack = number, [start]
                while stack:
                    here = np.array(stack.pop())
                    for there in map(tuple, here + offsets):
                        inside = all(0 <= i < n for i, n in zip(there, label_map.shape))
                        if inside and not expected[there] and label_map[there] == label_map[start]:
                            expected[there] = number
                            stack.append(there)
            assert count == number
            np.testing.assert_array_equal(components, expected)


@pytest.mark.parametrize("seed", range(10))
def test_connected_components_equal_scikit_image_in_2d_and_on_boolean_masks(seed):
    """Where skimage.measure.label numbers in raster order (2-D label maps, boolean masks in any
    dimension), the same numbers; negative and large values are values like any other."""
    measure = pytest.importorskip("skimage.measure")
    rng = np.random.default_rng(seed)
    for label_map in (rng.integers(-2, 3, (15, 12)) * 1000, rng.random((6, 7, 8)) < 0.4, rng.integers(0, 5, (20, 9)).astype(np.uint8)):
        for connectivity in range(1, label_map.ndim + 1):
            components, count = connected_components(label_map, connectivity)
            expected, expected_count = measure.label(label_map, background=0, return_num=True, connectivity=connectivity)
            assert count == expected_count
            np.testing.assert_array_equal(components, expected)


def test_detection_precision_recall_f1_hand_computed():
    gt = np.zeros((10, 10), int)
    gt[0:2, 0:2] = 1
    gt[5:7, 5:7] = 1
    gt[8:10, 0:2] = 1
    dt = np.zeros((10, 10), int)
    dt[0:2, 0:2] = 1  # TP
    dt[5:7, 5:6] = 1  # IoU 0.5 -> TP at 0.5, not at 0.6
    dt[0:1, 8:10] = 1  # FP
    images = [(instances_from_semantic(gt), instances_from_semantic(dt))]
    at_half = detection_scores(images, 0.5)
    assert (at_half.true_positives, at_half.false_positives, at_half.false_negatives) == (2, 1, 1)
    assert at_half.precision == pytest.approx(2 / 3)
    assert at_half.recall == pytest.approx(2 / 3)
    assert at_half.f1 == pytest.approx(4 / 6)
    stricter = detection_scores(images, 0.6)
    assert (stricter.true_positives, stricter.false_positives, stricter.false_negatives) == (1, 2, 2)
    empty = detection_scores([(instances_from_semantic(np.zeros((3, 3), int)),) * 2])
    assert np.isnan(empty.f1) and empty.values()[0].status == "both_empty"


# ---------------------------------------------------------------- pycocotools on real data


def test_map_equals_pycocotools_on_axons(data_dir):
    from segmetrics.inputs.io import load_label_image

    axons = load_label_image(data_dir / "ivadomed_axondeepseg_sem" / "sub-rat3_ses-01_sample-data9_SEM_seg-axon-manual.png").array
    semantic = (axons > 0).astype(np.uint8)
    gt, dt = perturbed_prediction(semantic, seed=1)
    assert len(gt) > 500 and len(dt) > 400
    result = assert_matches_coco([(gt, dt)], [1])
    assert 0 < result.map95 < result.map50_95 < result.map50 < 1


def test_map_equals_pycocotools_on_fetreg_frames(data_dir):
    from segmetrics.inputs.io import load_label_image

    images = []
    for seed, path in enumerate(sorted((data_dir / "fetreg2021_sample" / "output").glob("*.png"))):
        label_map = load_label_image(path).array
        images.append(perturbed_prediction(label_map, seed))
    result = assert_matches_coco(images, [1, 2, 3])
    assert result.n_ground_truth.tolist()[1] > 0  # the small tool class is present


def test_map_equals_pycocotools_on_spine_slices(data_dir):
    from segmetrics.inputs.io import load_label_image

    folder = data_dir / "panoptica_spine" / "matched_instance"
    ref, pred = (load_label_image(folder / f"{n}.nii.gz").array for n in ("ref", "pred"))
    kind = lambda ids: {i: (0 if i == 26 else i // 100 + 1) for i in ids}  # noqa: E731  vertebra/IVD/endplate
    ids = np.unique(np.r_[ref.ravel(), pred.ravel()])
    rng = np.random.default_rng(0)
    images = []
    for z in range(ref.shape[0]):
        gt = instances_from_labels(ref[z], kind(ids))
        dt = instances_from_labels(pred[z], kind(ids))
        if len(gt) + len(dt):
            dt = Instances(dt.labels, dt.ids, dt.classes, np.round(rng.random(len(dt)), 1))
            images.append((gt, dt))
    assert len(images) >= 10
    assert_matches_coco(images, [0, 1, 2, 3])


def test_connected_components_equal_scikit_image_on_real_maps(data_dir):
    """The spine instance maps (3-D, many values), the brain lesion masks (3-D, boolean) and the
    axon image (2-D): the same components, numbered alike."""
    measure = pytest.importorskip("skimage.measure")
    from segmetrics.inputs.io import load_label_image

    maps = [load_label_image(data_dir / "panoptica_spine" / "matched_instance" / f"{n}.nii.gz").array for n in ("ref", "pred")]
    maps.append(load_label_image(data_dir / "metricsreloaded_brain_lesions" / "Ref" / "CorrectLesion_0002_01_Ref.nii.gz", threshold=0.5).array > 0)
    maps.append(load_label_image(data_dir / "ivadomed_axondeepseg_sem" / "sub-rat3_ses-01_sample-data9_SEM_seg-axon-manual.png").array)
    for label_map in maps:
        for connectivity in (1, label_map.ndim):
            components, count = connected_components(label_map, connectivity)
            expected, expected_count = measure.label(label_map, background=0, return_num=True, connectivity=connectivity)
            assert count == expected_count > 10
            np.testing.assert_array_equal(components, expected)


def test_lesion_detection_runs_on_3d_brain_lesions(data_dir):
    from segmetrics.inputs.io import load_label_image

    folder = data_dir / "metricsreloaded_brain_lesions"
    ref = load_label_image(folder / "Ref" / "CorrectLesion_0002_01_Ref.nii.gz", threshold=0.5).array
    pred = load_label_image(folder / "Pred" / "CorrectLesion_0002_01_Pred.nii.gz", threshold=0.5).array
    gt, dt = instances_from_semantic(ref, connectivity=3), instances_from_semantic(pred, connectivity=3)
    assert len(gt) > 20 and len(dt) > 10
    result = detection_scores([(gt, dt)], 0.5)
    assert result.true_positives + result.false_negatives == len(gt)
    assert result.true_positives + result.false_positives == len(dt)
    assert 0 < result.f1 < 1
    ap = average_precision([(gt, dt)])
    assert ap.map50 <= result.recall + 1e-12  # AP@.5 cannot exceed the recall reached at IoU .5
    assert IOU_THRESHOLDS[0] == 0.5
