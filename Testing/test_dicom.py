"""DICOM SEG and RT Structure Set inputs: geometry, rasterisation rule, structure matching."""
import contextlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics import compare
from segmetrics.inputs.polygons import fill_even_odd
from segmetrics.inputs.readers.rtstruct import DEFAULT_CONTOUR_RESOLUTION_MM, read_structure_set
from segmetrics.spatial.geometry import resample_nearest
from segmetrics.inputs.io import InputPolicy, ReadError, apply_name_map, load_label_image, load_pair
from segmetrics.inputs.structure_names import match_key, normalise_name


def write_rtstruct(path, rois: dict) -> None:
    """An RT Structure Set ``{name: [polygon (N, 3) patient mm, ...]}`` (ROI numbers 1, 2, ...)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, RTStructureSetStorage, generate_uid

    dataset = Dataset()
    dataset.file_meta = FileMetaDataset()
    dataset.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset.file_meta.MediaStorageSOPClassUID = RTStructureSetStorage
    dataset.SOPClassUID, dataset.SOPInstanceUID, dataset.Modality = RTStructureSetStorage, generate_uid(), "RTSTRUCT"
    dataset.StructureSetROISequence, dataset.ROIContourSequence = Sequence(), Sequence()
    for number, (name, polygons) in enumerate(rois.items(), start=1):
        roi = Dataset()
        roi.ROINumber, roi.ROIName = number, name
        dataset.StructureSetROISequence.append(roi)
        contours = Dataset()
        contours.ReferencedROINumber = number
        contours.ContourSequence = Sequence()
        for polygon in polygons:
            contour = Dataset()
            contour.ContourGeometricType = "CLOSED_PLANAR"
            contour.NumberOfContourPoints = len(polygon)
            contour.ContourData = [f"{v:.6f}" for v in np.asarray(polygon, float).ravel()]
            contours.ContourSequence.append(contour)
        dataset.ROIContourSequence.append(contours)
    dataset.save_as(path, enforce_file_format=True)


def circle(radius, z, centre=(0.0, 0.0), vertices=720):
    angles = np.linspace(0, 2 * np.pi, vertices, endpoint=False)
    return np.column_stack([centre[0] + radius * np.cos(angles), centre[1] + radius * np.sin(angles),
                            np.full(vertices, float(z))])


def rectangle(x0, y0, x1, y1, z):
    return np.array([[x0, y0, z], [x1, y0, z], [x1, y1, z], [x0, y1, z]], float)


# --------------------------------------------------------------------------------- DICOM SEG
def test_dicom_seg_matches_the_label_maps_it_was_made_from(data_dir):
    folder = data_dir / "dcmqi"
    seg = load_label_image(folder / "partial_overlaps.dcm")
    assert seg.names == {1: "GREEN", 2: "ORANGE", 3: "PURPLE", 4: "LIGHT_BLUE", 5: "DARK_BLUE"}
    assert set(seg.segment_masks) == {2, 3}  # segments 2 and 3 overlap segment 1
    checked = 0
    for number in (1, 2, 3):
        labels = load_label_image(folder / f"partial_overlaps-{number}.nrrd")  # pixel value = segment number
        for label in labels.labels():
            on_nrrd_grid = resample_nearest(seg.with_array(seg.mask(label).astype(np.uint8)), labels)
            assert np.array_equal(on_nrrd_grid.array.astype(bool), labels.mask(label))
            checked += 1
    assert checked == 5


def test_dicom_seg_compares_with_dice_one_and_hd_zero_to_its_label_map(data_dir):
    folder = data_dir / "dcmqi"
    seg = load_label_image(folder / "liver.dcm")
    assert seg.names == {1: "Liver"}
    labels = load_label_image(folder / "liver_seg.nrrd")
    apply_name_map(labels, {1: "Liver"})
    result = compare(folder / "liver.dcm", labels, resample_to="reference", metrics="dice,hd")
    liver = result["Liver"]
    assert liver.value("dice") == 1.0 and liver.value("hd_mm") == 0.0


# --------------------------------------------------------------------- rasterisation rule
def test_even_odd_fill_agrees_with_scikit_image_on_random_polygons():
    polygon = pytest.importorskip("skimage.draw").polygon

    rng = np.random.default_rng(1)
    for _ in range(200):
        points = rng.uniform(-5, 35, (int(rng.integers(3, 10)), 2))
        rows, columns = polygon(points[:, 0], points[:, 1], (30, 30))
        expected = np.zeros((30, 30), bool)
        expected[rows, columns] = True
        assert np.array_equal(fill_even_odd([points], (30, 30)), expected)


def test_square_with_a_hole_by_separate_contours_and_by_keyhole(tmp_path):
    # pixel centres of the 1 mm contour grid lie on whole mm; edges at .5 mm leave no ties
    outer, inner = rectangle(0.5, 0.5, 20.5, 20.5, 0), rectangle(5.5, 5.5, 15.5, 15.5, 0)[::-1]
    keyhole = np.array([[0.5, 0.5], [20.5, 0.5], [20.5, 20.5], [10.5, 20.5], [10.5, 15.5], [15.5, 15.5],
                        [15.5, 5.5], [5.5, 5.5], [5.5, 15.5], [10.5, 15.5], [10.5, 20.5], [0.5, 20.5]])
    keyhole = np.column_stack([keyhole, np.zeros(len(keyhole))])
    write_rtstruct(tmp_path / "rt.dcm", {"ring": [outer, inner], "keyhole": [keyhole], "empty": []})
    image = load_label_image(tmp_path / "rt.dcm")
    assert image.spacing == (DEFAULT_CONTOUR_RESOLUTION_MM,) * 3  # a single plane
    for label, name in ((1, "ring"), (2, "keyhole")):
        assert image.names[label] == name
        assert image.mask(label).sum() == 400 - 100  # mm², exactly
    assert image.names[3] == "empty" and not image.mask(3).any()


def test_polygon_regions_follow_the_even_odd_rule_of_the_rasteriser(tmp_path):
    """The exact polygon region (MSI, Dice on polygons) and the raster fill agree: a contour traced
    twice or given twice cancels, a second ring inside is a hole, an out-and-back polygon (not on one
    line) encloses nothing. Edges at .5 mm: the 1 mm grid's pixel count is the area, exactly."""
    from segmetrics.inputs.polygons import even_odd_area

    square, hole = rectangle(0.5, 0.5, 10.5, 10.5, 0), rectangle(3.5, 3.5, 6.5, 6.5, 0)
    out_and_back = np.array([[0.5, 0.5, 0], [10.5, 0.5, 0], [10.5, 10.5, 0], [10.5, 0.5, 0]])
    cases = {"traced_twice": ([np.vstack([square, square])], 0), "given_twice": ([square, square], 0),
             "hole": ([square, hole], 100 - 9), "out_and_back": ([square, out_and_back], 100)}
    for name, (rings, area) in cases.items():
        assert even_odd_area([ring[:, :2] for ring in rings]) == pytest.approx(area, abs=1e-9), name
    write_rtstruct(tmp_path / "rt.dcm", {name: rings for name, (rings, _area) in cases.items()})
    image = load_label_image(tmp_path / "rt.dcm")
    for label, (rings, area) in enumerate(cases.values(), start=1):
        assert image.mask(label).sum() == area, image.names[label]
    result = compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", metrics=["dice", "msi", "contours"])
    for name in ("traced_twice", "given_twice"):
        assert result[name].status == "both_empty" and result[name].extras.get("msi_slices", []) == []
    for name in ("hole", "out_and_back"):
        assert [row.msi for row in result[name].extras["msi_slices"]] == [1.0]
    lengths = {name: [row["reference_length_mm"] for row in result[name].extras.get("contour_slices", [])]
               for name in cases}  # the contours drawn are the filled region's boundary
    assert lengths == {"traced_twice": [], "given_twice": [], "hole": [40.0 + 12.0], "out_and_back": [40.0]}


def test_polygon_regions_contain_the_pixel_centres_the_rasteriser_fills():
    """Random self-crossing rings, repeated rings and out-and-back rings: the pixel centres inside
    the exact region are those :func:`fill_even_odd` fills (random coordinates: no centre on an edge)."""
    shapely = pytest.importorskip("shapely")
    from segmetrics.inputs.polygons import even_odd_region

    rng = np.random.default_rng(3)
    rows, columns = np.mgrid[0:30, 0:30]
    for _ in range(60):
        rings = [rng.uniform(-2, 32, (int(rng.integers(3, 8)), 2)) for _ in range(int(rng.integers(1, 4)))]
        rings += [rings[0]] * int(rng.integers(0, 2)) + [np.vstack([rings[-1], rings[-1][-2:0:-1]])]
        region = shapely.union_all([shapely.Polygon(part.rings[0], part.rings[1:]) for part in even_odd_region(rings).parts])
        assert np.array_equal(shapely.contains_xy(region, rows, columns), fill_even_odd(rings, (30, 30)))


def test_rasterised_circle_area_and_dice_against_the_exact_disk(tmp_path):
    radius, resolution = 12.3, 0.5
    write_rtstruct(tmp_path / "rt.dcm", {"disk": [circle(radius, z) for z in (0.0, 2.0, 4.0)]})
    reference, _ = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", contour_resolution_mm=resolution)
    assert reference.spacing == (2.0, resolution, resolution)
    mask = reference.mask(1)
    assert mask.shape[0] == 3
    centres = reference.index_to_physical(np.argwhere(np.ones(mask.shape, bool)))
    exact = (np.hypot(centres[:, 0], centres[:, 1]) < radius).reshape(mask.shape)  # pixel centres in the disk
    dice = 2 * np.sum(mask & exact) / (mask.sum() + exact.sum())
    assert dice > 0.998
    area = mask[1].sum() * resolution ** 2
    assert area == pytest.approx(math.pi * radius ** 2, rel=0.01)
    assert np.array_equal(np.sort(reference.index_to_physical(np.argwhere(mask))[:, 2].round(6).tolist()
                                  )[[0, -1]], [0.0, 4.0])  # slices at the contour planes


def test_contours_are_rasterised_on_an_image_series_grid(tmp_path, data_dir):
    series = data_dir / "dcmqi/ct-3slice"
    grid = sitk.ReadImage(sorted(str(p) for p in series.iterdir()))
    spacing, origin = grid.GetSpacing(), np.asarray(grid.GetOrigin())
    # pixel columns 10..29 and rows 5..14 on the middle slice (edges half a pixel outside the centres)
    x0, y0 = origin[:2] + (np.array([10, 5]) - 0.5) * spacing[:2]
    x1, y1 = origin[:2] + (np.array([29, 14]) + 0.5) * spacing[:2]
    z = float(grid.TransformIndexToPhysicalPoint((0, 0, 1))[2])
    write_rtstruct(tmp_path / "rt.dcm", {"box": [rectangle(x0, y0, x1, y1, z)]})
    image, _ = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", image=series)
    expected = np.zeros(sitk.GetArrayFromImage(grid).shape, bool)
    expected[1, 5:15, 10:30] = True
    assert np.array_equal(image.mask(1), expected)
    assert image.spacing == pytest.approx(tuple(reversed(spacing)))


def test_a_structure_set_against_a_label_map_is_rasterised_on_the_label_map_grid(tmp_path):
    array = np.zeros((2, 30, 40), np.uint8)
    array[:, 5:15, 10:30] = 1  # x 10..29 mm, y 5..14 mm with 1 mm pixels at the origin
    labels = sitk.GetImageFromArray(array)
    sitk.WriteImage(labels, str(tmp_path / "box.nii.gz"))
    write_rtstruct(tmp_path / "rt.dcm", {"1": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in (0.0, 1.0)]})
    result = compare(tmp_path / "rt.dcm", tmp_path / "box.nii.gz", metrics="dice,hd")
    assert result["1"].value("dice") == 1.0 and result["1"].value("hd_mm") == 0.0


def test_real_structure_set_keeps_every_roi_and_reports_the_empty_one(data_dir):
    result = compare(data_dir / "dicompyler_core/rtss.dcm", data_dir / "dicompyler_core/rtss.dcm",
                     metrics="dice,apl_mm")
    names = [s.structure for s in result.structures]
    assert names == ["BODY", "Areola", "Borders", "Breast", "Heart", "Lt Lung", "Nodes", "Scar", "Tumor Bed",
                     "Tumor Bed Block"]
    assert result["Areola"].status == "both_empty"
    assert all(result[n].value("dice") == 1.0 and result[n].value("apl_mm") == 0.0 for n in names if n != "Areola")


def test_markers_are_not_structures(data_dir):
    from pydicom.data import get_testdata_file

    structures = read_structure_set(get_testdata_file("rtstruct.dcm"))
    assert structures.names == {1: "patient"}  # the two POINT isocentres are left out
    assert len(structures.contours[1]) == 3


def test_irregular_contour_planes_ask_for_the_image_series(tmp_path):
    write_rtstruct(tmp_path / "rt.dcm", {"a": [rectangle(0, 0, 5, 5, z) for z in (0.0, 2.0, 3.5)]})
    with pytest.raises(ReadError, match="--image"):
        load_label_image(tmp_path / "rt.dcm")


# ----------------------------------------------------------------------- structure matching
def test_names_match_ignoring_case_and_separators_and_by_synonyms(tmp_path):
    from segmetrics.inputs.structure_names import read_synonyms

    assert normalise_name("Lung_L") == normalise_name("lung l") == normalise_name("LUNG-L") == "lung l"
    square = [rectangle(0.5, 0.5, 10.5, 10.5, 0)]
    write_rtstruct(tmp_path / "ref.dcm", {"Lung_L": square, "Heart": square, "SpinalCord": square})
    write_rtstruct(tmp_path / "test.dcm", {"lung l": square, "Coeur": square, "Cord": square})
    (tmp_path / "synonyms.json").write_text(json.dumps({"Heart": ["coeur"]}))
    synonyms = read_synonyms(tmp_path / "synonyms.json")
    assert match_key("COEUR", synonyms) == match_key("heart")
    result = compare(tmp_path / "ref.dcm", tmp_path / "test.dcm", metrics="dice", synonyms=synonyms)
    assert result["Lung_L"].value("dice") == 1.0 and result["Heart"].value("dice") == 1.0
    assert result["SpinalCord"].value("dice") == 1.0  # Cord: a common abbreviation of the TG-263 name
    assert "test structure 'lung l' paired with reference 'Lung_L' (case and separators)" in result.notes
    assert "test structure 'Cord' paired with reference 'SpinalCord' (TG-263)" in result.notes


def test_repeated_roi_names_are_refused_by_the_reader(tmp_path):
    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(0, 0, 5, 5, 0.0)], "Lung": [rectangle(9, 0, 14, 5, 0.0)]})
    import pydicom

    dataset = pydicom.dcmread(tmp_path / "rt.dcm")
    dataset.StructureSetROISequence[1].ROIName = "Heart"
    dataset.save_as(tmp_path / "rt.dcm")
    with pytest.raises(ReadError, match=r"rt\.dcm: structure names must be unique, but 'Heart' \(labels 1, 2\)"):
        load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm")


@pytest.mark.needs("rich")
def test_cli_compares_two_structure_sets(tmp_path, capsys):
    from segmetrics.cli import main

    write_rtstruct(tmp_path / "ref.dcm", {"Heart": [circle(10, 0, vertices=90)]})
    write_rtstruct(tmp_path / "test.dcm", {"HEART": [circle(10, 0, centre=(3, 0), vertices=90)]})
    assert main(["compare", str(tmp_path / "ref.dcm"), str(tmp_path / "test.dcm"), "--metrics", "contours",
                 "--contour-resolution", "0.5", "--format", "json", "-o", str(tmp_path / "out.json")]) == 0
    records = json.loads((tmp_path / "out.json").read_text())
    text = json.dumps(records)
    assert "Heart" in text and "contour_hd_mm" in text


def test_batch_manifest_accepts_structure_sets(tmp_path):
    from segmetrics.evaluation.batch import Case, evaluate_case

    write_rtstruct(tmp_path / "ref.dcm", {"Heart": [circle(10, z) for z in (0.0, 2.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"heart": [circle(10, z, centre=(0.5, 0)) for z in (0.0, 2.0, 4.0)]})
    outcome = evaluate_case(Case("c1", str(tmp_path / "ref.dcm"), str(tmp_path / "test.dcm")), metrics="dice")
    dice = [r for r in outcome.records if r["metric"] == "dice"]
    assert [r["structure"] for r in dice] == ["Heart"]
    # on one shared grid: two slices of overlapping disks (lens area), a third slice in the test only
    radius, shift = 10.0, 0.5
    lens = 2 * radius ** 2 * math.acos(shift / (2 * radius)) - shift / 2 * math.sqrt(4 * radius ** 2 - shift ** 2)
    assert dice[0]["value"] == pytest.approx(2 * 2 * lens / (5 * math.pi * radius ** 2), rel=0.02)


def test_fractional_dicom_seg_is_binarised_at_half_or_at_the_threshold(tmp_path, data_dir):
    import highdicom
    import pydicom
    from pydicom.sr.codedict import codes

    files = sorted((data_dir / "dcmqi/ct-3slice").iterdir())
    sources = [pydicom.dcmread(path) for path in files]
    for source in sources:
        source.SpecificCharacterSet, source.PatientName = "ISO_IR 100", "Test^CT"
    sources.sort(key=lambda source: float(source.ImagePositionPatient[2]))
    fractions = np.zeros((len(sources), sources[0].Rows, sources[0].Columns), np.float32)
    fractions[1, 100:110, 200:220] = 0.7
    fractions[1, 110:115, 200:220] = 0.3
    description = highdicom.seg.SegmentDescription(
        segment_number=1, segment_label="soft", segmented_property_category=codes.SCT.Tissue,
        segmented_property_type=codes.SCT.Tissue, algorithm_type=highdicom.seg.SegmentAlgorithmTypeValues.MANUAL)
    seg = highdicom.seg.Segmentation(
        source_images=sources, pixel_array=fractions, segmentation_type=highdicom.seg.SegmentationTypeValues.FRACTIONAL,
        segment_descriptions=[description], series_instance_uid=highdicom.UID(), series_number=2,
        sop_instance_uid=highdicom.UID(), instance_number=1, manufacturer="test", manufacturer_model_name="test",
        software_versions="0", device_serial_number="0", max_fractional_value=100)
    seg.save_as(tmp_path / "fractional.dcm")

    image = load_label_image(tmp_path / "fractional.dcm")
    assert image.names == {1: "soft"}
    ct = sitk.ReadImage([str(path) for path in files])
    expected = {ct.TransformIndexToPhysicalPoint((column, row, 1))
                for row in range(100, 110) for column in range(200, 220)}
    found = image.index_to_physical(np.argwhere(image.mask(1)))
    assert len(found) == len(expected)
    assert np.allclose(sorted(map(tuple, found)), sorted(expected), atol=1e-3)
    assert load_label_image(tmp_path / "fractional.dcm", threshold=0.2).mask(1).sum() == 15 * 20


def test_a_bad_contour_resolution_is_one_line(tmp_path, capsys):
    from test_validation import assert_one_line_error

    write_rtstruct(tmp_path / "rt.dcm", {"a": [rectangle(0, 0, 5, 5, 0)]})
    assert_one_line_error(capsys, "--contour-resolution", "compare", tmp_path / "rt.dcm", tmp_path / "rt.dcm",
                          "--contour-resolution", "0")


def test_overlapping_segments_survive_resampling(data_dir):
    folder = data_dir / "dcmqi"
    orange = load_label_image(folder / "partial_overlaps-2.nrrd")  # segment 2 alone, on a flipped grid
    apply_name_map(orange, {2: "ORANGE"})
    result = compare(orange, folder / "partial_overlaps.dcm", resample_to="reference", metrics="dice",
                     labels=["ORANGE"])
    assert result["ORANGE"].value("dice") == 1.0  # segment 2 overlaps segment 1: kept in segment_masks


def test_a_dicom_series_folder_as_the_resampling_grid(tmp_path, data_dir):
    series = data_dir / "dcmqi/ct-3slice"
    from segmetrics.inputs.readers import read_image_grid
    from segmetrics.spatial.geometry import LabelImage

    ct = read_image_grid(series)
    # the same box on a coarse and on a fine grid covering the CT, both with their own geometry
    box = np.zeros(ct.array.shape, np.uint8)
    box[:, 100:200, 150:300] = 1
    fine = ct.with_array(box)
    coarse = LabelImage(box[:, ::2, ::2], (ct.spacing[0], ct.spacing[1] * 2, ct.spacing[2] * 2),
                        np.asarray(ct.origin) + np.r_[ct.spacing[2], ct.spacing[1], 0] / 2, ct.direction)
    result = compare(fine, coarse, resample_to=str(series), metrics="dice")
    assert result["1"].value("dice") == pytest.approx(1.0, abs=0.02)
    assert any("resampled onto the grid of" in note for note in result.notes)


def test_slicer_segmentations_with_planar_contour_source(tmp_path):
    """What SlicerRT makes of an RTSTRUCT: segments whose source is planar contours (no converter
    in slicer-core), rasterised by this package on the working copies only."""
    pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
    from segmetrics import mrml

    radius, shift = 10.0, 2.0
    write_rtstruct(tmp_path / "ref.dcm", {"disk": [circle(radius, z) for z in (0.0, 2.0, 4.0)], "empty": []})
    write_rtstruct(tmp_path / "test.dcm", {"disk": [circle(radius, z, centre=(shift, 0)) for z in (0.0, 2.0, 4.0)],
                                           "empty": []})
    reference, test = load_pair(tmp_path / "ref.dcm", tmp_path / "test.dcm")
    scene = mrml.create_headless_scene().scene
    nodes = [mrml.add_segmentation_from_contours(scene, image, name) for image, name in ((reference, "r"), (test, "t"))]
    result, _ = mrml.compare_segmentations(*nodes, metrics=["dice", "hd_mm", "apl_mm"])
    lens = 2 * radius ** 2 * math.acos(shift / (2 * radius)) - shift / 2 * math.sqrt(4 * radius ** 2 - shift ** 2)
    assert result["disk"].value("dice") == pytest.approx(lens / (math.pi * radius ** 2), rel=0.01)
    assert result["disk"].value("hd_mm") == pytest.approx(shift, abs=1.0)  # one 1 mm pixel
    assert result["empty"].status == "both_empty"
    assert any("planar contour (rasterised by segmetrics.inputs.readers.rtstruct" in note for note in result.notes)
    assert [n.GetSegmentation().GetSourceRepresentationName() for n in nodes] == ["Planar contour"] * 2
    assert nodes[0].GetSegmentation().GetNumberOfSegments() == 2  # the inputs are left as they were


# ---------------------------------------------------------------------- frames of reference
def _modified_copy(source, target, **changes):
    """A copy of a DICOM file with top-level and nested attributes set: ``FrameOfReferenceUID``
    also in every ``ReferencedFrameOfReferenceSequence`` item and ROI (``ReferencedFrameOfReferenceUID``)."""
    import pydicom

    dataset = pydicom.dcmread(source)
    for keyword, value in changes.items():
        setattr(dataset, keyword, value)
        if keyword == "FrameOfReferenceUID":
            for frame in dataset.get("ReferencedFrameOfReferenceSequence", []):
                frame.FrameOfReferenceUID = value
            for roi in dataset.get("StructureSetROISequence", []):
                roi.ReferencedFrameOfReferenceUID = value
    target.parent.mkdir(parents=True, exist_ok=True)
    dataset.save_as(target)
    return target


def test_a_structure_set_from_another_frame_of_reference_is_refused(tmp_path, data_dir, capsys):
    from segmetrics.cli import main

    folder = data_dir / "dicompyler_core"
    ct = _modified_copy(folder / "ct.0.dcm", tmp_path / "ct" / "ct.0.dcm")
    one_slice = InputPolicy(allow_crop=True)  # a CT of one slice: the other planes' contours are left out
    result = compare(folder / "rtss.dcm", folder / "rtss.dcm", image=ct.parent, metrics="dice", input_policy=one_slice)
    assert not any("warning" in note for note in result.notes)  # the series the contours reference
    other = _modified_copy(folder / "rtss.dcm", tmp_path / "other.dcm", FrameOfReferenceUID="1.2.3.4")
    advice = {ct.parent: r"\(give the image series the contours were drawn on \(CLI: --image DIR\)\)$",
              None: r"\(compare structure sets drawn on the same scan, or register them first\)$"}
    for reference, test, image in ((other, other, ct.parent), (folder / "rtss.dcm", other, None)):
        with pytest.raises(ReadError, match=r"frame of reference .* not the same patient coordinates " + advice[image]):
            compare(reference, test, image=image, metrics="dice")
    assert main(["compare", str(other), str(other), "--image", str(ct.parent), "--metrics", "dice"]) != 0
    error = capsys.readouterr().err.strip()
    assert "1.2.3.4" in error and len(error.splitlines()) == 1


def test_an_image_series_the_structure_set_does_not_reference_gives_a_warning(tmp_path, data_dir):
    folder = data_dir / "dicompyler_core"
    ct = _modified_copy(folder / "ct.0.dcm", tmp_path / "ct" / "ct.0.dcm", SeriesInstanceUID="1.2.3.5")
    result = compare(folder / "rtss.dcm", folder / "rtss.dcm", image=ct.parent, metrics="dice",
                     input_policy=InputPolicy(allow_crop=True))  # a CT of one slice: other planes left out
    warnings = [note for note in result.notes if note.startswith("warning")]
    assert len(warnings) == 2 and all("1.2.3.5" in w and "references image series" in w for w in warnings)


def test_contour_points_parsed_from_the_raw_text_equal_pydicoms_values(data_dir):
    import pydicom

    path = data_dir / "dicompyler_core/rtss.dcm"
    structures = read_structure_set(path)
    dataset = pydicom.dcmread(path)
    for roi in dataset.ROIContourSequence:
        expected = [np.asarray(c.ContourData, float).reshape(-1, 3) for c in roi.get("ContourSequence", [])]
        got = structures.contours[int(roi.ReferencedROINumber)]
        assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert sum(len(p) for p in structures.polygons()) == 88158


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_a_non_finite_contour_coordinate_is_one_line_naming_the_file_and_roi(tmp_path, bad):
    import warnings

    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(0, 0, 5, 5, 0.0)]})
    text = (tmp_path / "rt.dcm").read_bytes().replace(b"5.000000", bad.encode().ljust(8), 1)
    (tmp_path / "rt.dcm").write_bytes(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydicom: invalid DS value
        with pytest.raises(ReadError, match=r"rt\.dcm: ROI 1 has a contour with unreadable ContourData \(a coordinate "
                                            r"is NaN or infinite\)"):
            load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm")


def test_contours_folded_onto_a_line_enclose_nothing(tmp_path):
    line = np.array([[0, 0, 0], [5, 5, 0], [10, 10, 0], [5, 5, 0]], float)  # zero area: out and back
    bowtie = np.array([[0, 0, 2], [10, 10, 2], [10, 0, 2], [0, 10, 2]], float)  # crossing, area 50 mm²
    write_rtstruct(tmp_path / "rt.dcm", {"line": [line], "bowtie": [bowtie]})
    structures = read_structure_set(tmp_path / "rt.dcm")
    assert structures.contours[1] == [] and len(structures.contours[2]) == 1
    result = compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", metrics=["dice", "msi", "contours"])
    assert result["line"].status == "both_empty" and result["line"].extras.get("msi_slices", []) == []
    assert result["bowtie"].value("dice") == 1.0 and result["bowtie"].value("msi") == 1.0


def test_contours_enclosing_no_area_are_counted_in_a_note_naming_the_roi(tmp_path):
    two_points = np.array([[0, 0, 0], [5, 5, 0]], float)
    out_and_back = np.array([[0, 0, 0], [10, 0, 0], [10, 10, 0], [10, 0, 0]], float)  # not on one line
    write_rtstruct(tmp_path / "rt.dcm", {"gtv": [two_points, out_and_back, rectangle(0, 0, 4, 4, 0)],
                                         "ctv": [rectangle(0, 0, 8, 8, 0)]})
    assert read_structure_set(tmp_path / "rt.dcm").dropped == {1: 2}
    notes = compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", metrics=["dice"]).notes
    dropped = [note for note in notes if "enclose no area" in note]
    assert len(dropped) == 2 and all("2 contour(s) of 'gtv'" in note for note in dropped)  # one per side


@pytest.mark.parametrize("numbers, problem", [((0, 2), "ROI number 0 \\('a'\\) is not a positive number"),
                                              ((-3, 2), "ROI number -3 \\('a'\\) is not a positive number"),
                                              ((1, 1), "ROI number 1 \\('a'\\) is used by more than one ROI")])
def test_roi_numbers_that_cannot_be_label_values_are_refused(tmp_path, numbers, problem):
    """ROI number 0 was label 0, the background: a square far from the test's scored Dice 1; two ROIs
    with one number were merged under the last name; a negative one was a traceback."""
    import pydicom

    write_rtstruct(tmp_path / "rt.dcm", {"a": [rectangle(40, 40, 50, 50, 0.0)], "b": [rectangle(0, 0, 10, 10, 0.0)]})
    dataset = pydicom.dcmread(tmp_path / "rt.dcm")
    for roi, contours, number in zip(dataset.StructureSetROISequence, dataset.ROIContourSequence, numbers):
        roi.ROINumber = contours.ReferencedROINumber = number
    dataset.save_as(tmp_path / "rt.dcm")
    with pytest.raises(ReadError, match=r"rt\.dcm: " + problem):
        read_structure_set(tmp_path / "rt.dcm")


def test_contour_planes_sharing_a_thick_slice_are_united_not_cancelled(tmp_path):
    """Squares every 1.5 mm on a 3 mm grid: planes 0 and 1.5 mm (and 3 and 4.5 mm) fall on one
    slice; the even-odd rule across the two planes made the identical squares cancel out."""
    grid = sitk.GetImageFromArray(np.zeros((4, 20, 20), np.uint8))
    grid.SetSpacing((1.0, 1.0, 3.0))
    grid.SetOrigin((-2.0, -2.0, 0.0))
    sitk.WriteImage(grid, str(tmp_path / "grid.nrrd"))
    square = [rectangle(0, 0, 10, 10, z) for z in (0.0, 1.5, 3.0, 4.5, 6.0)]
    write_rtstruct(tmp_path / "rt.dcm", {"a": square})
    image = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", image=tmp_path / "grid.nrrd")[0]
    assert image.mask(1).sum(axis=(1, 2)).tolist() == [100, 100, 100, 0]  # 10 x 10 pixel centres each
    assert any("each holds their union" in note for note in image.notes)
    # within one plane the even-odd rule holds: a hole stays a hole, whatever the plane's position
    for z in (0.015, 3.005, 6.0):
        corners = rectangle(0.5, 0.5, 10.5, 10.5, z)
        outer = np.concatenate([np.linspace(a, b, 181, endpoint=False) for a, b in zip(corners, np.roll(corners, -1, 0))])
        write_rtstruct(tmp_path / "rt.dcm", {"ring": [outer, rectangle(3.5, 3.5, 6.5, 6.5, z)]})
        image = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", image=tmp_path / "grid.nrrd")[0]
        assert image.mask(1).sum() == 100 - 9 and not image.notes  # pixel centres 1..10 minus 4..6, x and y


def test_a_contour_grid_too_large_for_memory_is_refused_in_one_line(tmp_path):
    write_rtstruct(tmp_path / "rt.dcm", {"body": [rectangle(0, 0, 400, 300, 0.0)]})
    with pytest.raises(ReadError, match=r"rt\.dcm: a 0\.0001 mm contour grid would hold 1 x 300000\d x 400000\d voxels"):
        load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", contour_resolution_mm=0.0001)  # 12 TB


def test_rois_without_a_name_are_named_by_number_and_a_contour_without_its_roi_number_is_one_line(tmp_path):
    import pydicom

    write_rtstruct(tmp_path / "rt.dcm", {"": [rectangle(0, 0, 10, 10, 0.0)], "b": [rectangle(20, 0, 30, 10, 0.0)]})
    dataset = pydicom.dcmread(tmp_path / "rt.dcm")
    del dataset.StructureSetROISequence[1].ROIName  # type 2, yet missing in some exports
    dataset.save_as(tmp_path / "rt.dcm")
    assert read_structure_set(tmp_path / "rt.dcm").names == {1: "1", 2: "2"}
    del dataset.ROIContourSequence[0].ReferencedROINumber
    dataset.save_as(tmp_path / "rt.dcm")
    with pytest.raises(ReadError, match=r"rt\.dcm: an item of the structure set has no valid ReferencedROINumber"):
        read_structure_set(tmp_path / "rt.dcm")


def test_a_name_map_keeps_the_empty_structures_it_names(tmp_path):
    write_rtstruct(tmp_path / "rt.dcm", {"a": [rectangle(0, 0, 10, 10, 0.0)], "e": []})
    reference, test = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm")
    for image in (reference, test):
        apply_name_map(image, {1: "Alpha", 2: "Empty"})
    result = compare(reference, test, metrics="dice")
    assert [(s.structure, s.status) for s in result.structures] == [("Alpha", "ok"), ("Empty", "both_empty")]


@pytest.mark.parametrize("far", [1e6, -1e9, 1e300])
def test_a_contour_coordinate_far_beyond_any_patient_is_one_line(tmp_path, capsys, far):
    """A point 1 km or more from the origin is not patient mm: refused in one line naming the file
    and ROI (the polygon metrics sampled such a contour every 0.1 mm: 3 GB for 1e7 mm, more for
    larger ones, then MemoryError or the OOM killer), on an image grid the polygon lies across."""
    from segmetrics.cli import main

    grid = sitk.GetImageFromArray(np.zeros((3, 40, 40), np.uint8))
    grid.SetSpacing((1.0, 1.0, 3.0))
    grid.SetOrigin((-20.0, -20.0, 0.0))
    sitk.WriteImage(grid, str(tmp_path / "grid.nrrd"))
    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(8.0, 3.0)]})
    with pytest.warns(UserWarning, match="exceeds the maximum length") if abs(far) >= 1e9 else contextlib.nullcontext():
        # pydicom warns about DS strings longer than 16 characters, as such a far value needs
        write_rtstruct(tmp_path / "test.dcm", {"a": [np.array([[0.0, 0.0, 3.0], [10.0, 0.0, 3.0], [far, 5.0, 3.0]])]})
    code = main(["compare", str(tmp_path / "reference.dcm"), str(tmp_path / "test.dcm"), "--metrics", "msi,contours",
                 "--image", str(tmp_path / "grid.nrrd")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "test.dcm: ROI 1 has a contour" in err and "not patient millimetres" in err


@pytest.mark.parametrize("pixdim", [0.0, float("nan")])
@pytest.mark.needs("rich")
def test_an_image_grid_with_a_broken_voxel_size_is_refused(tmp_path, capsys, pixdim):
    """--image (and --resample-to) files pass the header checks of every input: a NIfTI pixdim
    of 0 or NaN, which ITK reads as 1 mm, rasterised the contours on a silently wrong grid."""
    import struct

    from segmetrics.cli import main

    grid = sitk.GetImageFromArray(np.zeros((3, 40, 40), np.uint8))
    grid.SetSpacing((0.5, 0.5, 3.0))
    grid.SetOrigin((-10.0, -10.0, 0.0))
    sitk.WriteImage(grid, str(tmp_path / "grid.nii"))
    data = bytearray((tmp_path / "grid.nii").read_bytes())
    data[80:84] = struct.pack("<f", pixdim)  # pixdim[1]: the x voxel size
    (tmp_path / "grid.nii").write_bytes(bytes(data))
    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(4.0, 3.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [circle(4.5, 3.0)]})
    for option in ("--image", "--resample-to"):
        code = main(["compare", str(tmp_path / "reference.dcm"), str(tmp_path / "test.dcm"), "--metrics", "dice",
                     option, str(tmp_path / "grid.nii")])
        err = capsys.readouterr().err
        assert code == 2 and len(err.splitlines()) == 1 and "grid.nii" in err and "pixdim" in err, (option, err)


@pytest.mark.parametrize("damaged", [False, True])
def test_a_gzipped_image_grid_is_decompressed_once_and_a_damaged_one_refused(tmp_path, monkeypatch, damaged, flip_middle_byte):
    """An --image / --resample-to .nii.gz has its gzip stream checked on the voxels ITK read (as
    every input): an intact file is decompressed once, not a second time by the file checks; a
    file with one damaged byte in its stream is still refused."""
    from segmetrics.inputs.readers import files
    from segmetrics.inputs.readers import read_image_grid

    rng = np.random.default_rng(7)
    image = sitk.GetImageFromArray(rng.integers(-1000, 1000, (6, 20, 30)).astype(np.int16))
    image.SetSpacing((0.5, 0.75, 2.5))
    sitk.WriteImage(image, str(tmp_path / "grid.nii.gz"))
    if damaged:
        flip_middle_byte(tmp_path / "grid.nii.gz")
        with pytest.raises(ReadError, match="grid.nii.gz.*cut short or damaged"):
            read_image_grid(tmp_path / "grid.nii.gz")
        return
    monkeypatch.setattr(files, "data_length", lambda path: pytest.fail(f"{path} decompressed twice"))
    grid = read_image_grid(tmp_path / "grid.nii.gz")
    assert grid.array.shape == (6, 20, 30) and grid.spacing == pytest.approx((2.5, 0.75, 0.5))


def test_an_image_folder_without_a_series_is_one_line(tmp_path, capfd):
    """ITK's 'No Series were found' warning (three lines on standard error) no longer precedes the error."""
    from segmetrics.cli import main

    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(4.0, 3.0)]})
    (tmp_path / "empty").mkdir()
    code = main(["compare", str(tmp_path / "reference.dcm"), str(tmp_path / "reference.dcm"), "--image",
                 str(tmp_path / "empty")])
    err = capfd.readouterr().err
    assert code == 2 and err.splitlines() == [f"segmetrics compare: error: {tmp_path / 'empty'}: holds 0 DICOM image "
                                              "series; give a folder with exactly one"]


def test_an_image_series_with_uneven_slices_is_refused(tmp_path, data_dir, capfd, monkeypatch):
    """Slices at -126.69, -127.69 and -130.69 mm: ITK builds a regular 2 mm grid (-130.69, -128.69,
    -126.69) with a warning only, so the contours of -127.69 mm were filled on the slice of -128.69
    mm. Refused in one line (without ITK's warning); the series with its own even slices still
    gives its 1 mm grid, and its slices' positions come from ITK's reading of the series, not from
    reading every file again with pydicom (only the first slice's file is: its class and UIDs)."""
    import shutil

    import pydicom

    from segmetrics.cli import main
    from segmetrics.inputs.readers import read_image_grid

    shutil.copytree(data_dir / "dcmqi/ct-3slice", tmp_path / "series")
    read = []
    original_dcmread = pydicom.dcmread
    monkeypatch.setattr(pydicom, "dcmread", lambda path, *a, **k: (read.append(Path(path).name),
                                                                   original_dcmread(path, *a, **k))[1])
    assert read_image_grid(tmp_path / "series").spacing[0] == pytest.approx(1.0)
    assert len(set(read)) == 1  # the first file in slice order
    monkeypatch.undo()
    last = pydicom.dcmread(tmp_path / "series/03.dcm")
    last.ImagePositionPatient = [-235.199997, -226.800003, -130.690002]
    last.save_as(tmp_path / "series/03.dcm")
    with pytest.raises(ReadError, match=r"series: the slices of the DICOM series are not evenly spaced \(gaps from 1 "
                                        r"to 3 mm\)"):
        read_image_grid(tmp_path / "series")
    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(4.0, -127.69)]})
    capfd.readouterr()
    code = main(["compare", str(tmp_path / "reference.dcm"), str(tmp_path / "reference.dcm"), "--metrics", "dice",
                 "--image", str(tmp_path / "series")])
    err = capfd.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "not evenly spaced" in err, err


@pytest.mark.parametrize("slice_axis", [0, 1, 2])
def test_label_packing_takes_whole_masks_and_slice_dicts_along_the_same_axis(slice_axis):
    """pack_masks's two mask forms (a 3-D array, ``{slice: 2-D mask}`` along ``slice_axis``) give
    the same labels: whole arrays were cut along the first axis whatever ``slice_axis`` said, so a
    (4, 5, 6) mask with slices along axis 1 raised or landed transposed."""
    from segmetrics.inputs.masks import pack_masks

    rng = np.random.default_rng(slice_axis)
    first, second = rng.random((2, 4, 5, 6)) < 0.3
    second &= ~first
    by_slice = {k: np.take(second, k, axis=slice_axis) for k in range(second.shape[slice_axis])}
    image = pack_masks({1: first, 2: by_slice}, {1: "a", 2: "b"}, (1.0, 1.0, 1.0), (0.0,) * 3, np.eye(3).ravel(),
                       shape=first.shape, slice_axis=slice_axis)
    np.testing.assert_array_equal(image.array, first * 1 + second * 2)
