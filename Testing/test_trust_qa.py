"""More cases of issue 11's kinds, tried through the public paths (QA round): each test failed
before its fix."""
import json
import re

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

from segmetrics import Parameters, compare
from segmetrics.evaluation.batch import Case, run_batch
from segmetrics.spatial.geometry import LabelImage
from segmetrics.inputs.io import ReadError, load_label_image
from segmetrics.registry import ParameterError
from segmetrics.report import report_batch


def _box(shape=(6, 8, 9)):
    array = np.zeros(shape, np.uint8)
    array[1:5, 2:6, 2:7] = 1
    return array


def test_multi_page_tiff_is_refused_not_read_as_its_first_page(tmp_path):
    """A TIFF stack of 3 slices was read as its first slice alone: a 3-D mask silently became 2-D."""
    pages = [Image.fromarray(_box()[k] * 255) for k in range(3)]
    path = tmp_path / "stack.tif"
    pages[0].save(path, save_all=True, append_images=pages[1:])
    with pytest.raises(ReadError, match=r"stack\.tif: .*3 (pages|frames)"):
        load_label_image(path)


@pytest.mark.parametrize("field", ["Offset", "Origin", "Position"])
@pytest.mark.parametrize("value", ["nan", "inf", "abc"])
def test_metaimage_origin_not_finite_is_refused(tmp_path, field, value):
    """ITK read ``Offset = nan 0 0`` as origin (0, 0, 0): a broken header passed as a valid grid."""
    path = tmp_path / "mask.mha"
    sitk.WriteImage(sitk.GetImageFromArray(_box()), str(path))
    text = path.read_bytes()
    header_end = text.index(b"ElementDataFile")
    header = re.sub(rb"Offset = [^\n]*", f"{field} = {value} 0 0".encode(), text[:header_end])
    path.write_bytes(header + text[header_end:])
    with pytest.raises(ReadError, match=rf"mask\.mha: .*{field}"):
        load_label_image(path)


@pytest.mark.parametrize("window", [2.5, 3.7, "3"])
def test_paper_roughness_window_must_be_whole_voxels(window):
    """The paper convention's window is a tile side in voxels: 2.5 was silently truncated to 2."""
    with pytest.raises(ParameterError, match="roughness_window_mm"):
        Parameters(roughness_convention="paper", roughness_window_mm=window)
    assert Parameters(roughness_convention="paper", roughness_window_mm=3.0).roughness_window_mm == 3


@pytest.mark.parametrize("name", ["\tlung", " lung ", "lung\n", "\r=cmd"])
@pytest.mark.needs("pandas")
def test_structure_names_with_outer_whitespace_are_selectable_and_reported(tmp_path, name):
    """``labels=[name]`` stripped the name, so a structure named with a leading tab / trailing newline
    could not be selected, and ``--report`` (which recomputes the worst case by name) failed after the
    whole batch had run."""
    reference = LabelImage(_box(), (1.0, 1.0, 2.0), names={1: name})
    test_array = _box()
    test_array[1, 2, 2] = 0
    test = LabelImage(test_array, (1.0, 1.0, 2.0), names={1: name})
    result = compare(reference, test, labels=[name], metrics="dice")
    voxels = int(_box().sum())
    assert result[name].value("dice") == pytest.approx(2 * (voxels - 1) / (2 * voxels - 1))

    folder = tmp_path / "in"
    folder.mkdir()
    for side, image in (("ref", reference), ("test", test)):
        sitk.WriteImage(sitk.GetImageFromArray(image.array), str(folder / f"{side}.nrrd"))
    (folder / "names.json").write_text(json.dumps({"1": name}))
    case = Case("case", str(folder / "ref.nrrd"), str(folder / "test.nrrd"), str(folder / "names.json"))
    run_batch([case], tmp_path / "out", metrics="dice,msi", progress=False)
    report_batch(tmp_path / "out", [case], tmp_path / "report")
    assert (tmp_path / "report" / "report.md").is_file()


@pytest.mark.parametrize("params", [{"hd_percentile": "95"}, {"nsd_tolerance_mm": float("nan")}, {"bogus": 1},
                                    {"msi_axis": 3}, "hd_percentile=95", 5])
def test_python_api_refuses_wrong_params_with_one_parameter_error(tmp_path, params):
    """A dict (or anything else) given as ``params`` to ``compare``/``run_batch`` raised AttributeError /
    TypeError from deep inside; it is checked like ``Parameters`` itself."""
    image = LabelImage(_box(), (1.0, 1.0, 2.0))
    with pytest.raises(ParameterError):
        compare(image, image, params=params, metrics="dice")
    path = tmp_path / "mask.nrrd"
    sitk.WriteImage(sitk.GetImageFromArray(_box()), str(path))
    with pytest.raises(ParameterError):
        run_batch([Case("a", str(path), str(path))], tmp_path / "out", params=params, metrics="dice", progress=False)
    assert not (tmp_path / "out").exists()


def test_python_api_accepts_a_dict_of_parameter_fields():
    reference = LabelImage(_box(), (1.0, 1.0, 1.0))
    test_array = np.zeros_like(_box())
    test_array[1:5, 2:6, 4:9] = 1  # the box moved by 2 voxels along x
    result = compare(reference, LabelImage(test_array, (1.0, 1.0, 1.0)), params={"nsd_tolerance_mm": 0.5},
                     metrics="hd_mm,nsd")
    assert result["1"].value("hd_mm") == pytest.approx(2.0)
    assert result["1"].get("nsd").params["tolerance_mm"] == 0.5


@pytest.mark.parametrize("connectivity", [0, 3, -1, 1.5, True])
def test_frames_connectivity_out_of_range_for_2d_is_one_clear_error(tmp_path, connectivity):
    """``connectivity`` beyond a 2-D frame's dimension (or not an integer) reached skimage, whose
    error does not name the option (and 1.5 / True passed without an error)."""
    from segmetrics.evaluation.frames import evaluate_folders

    for side in ("pred", "gt"):
        (tmp_path / side).mkdir()
        Image.fromarray(_box()[2] * 3).save(tmp_path / side / "frame.png")
    with pytest.raises(ValueError, match=r"connectivity must be 1 \(faces\) to 2"):
        evaluate_folders(tmp_path / "pred", tmp_path / "gt", instances=True, connectivity=connectivity)
