"""Results people can read and reuse: terminal table, wide CSV, provenance, data frames, image inputs."""
import csv
import hashlib
import io
import json
import math
from datetime import datetime, timezone

import numpy as np
import pytest
import SimpleITK as sitk
Console = pytest.importorskip("rich.console").Console

import segmetrics
from segmetrics.cli import main
from segmetrics.spatial.geometry import LabelImage, as_label_image, foreground_outside
from segmetrics.outputs.tables import display_value, result_tables
from segmetrics.registry import Parameters

#: Long structure names as in TotalSegmentator: they must never be broken in the table.
NAMES = {1: "portal_vein_and_splenic_vein", 2: "lung_middle_lobe_right", 3: "small_bowel", 4: "pancreas",
         5: "iliopsoas_left"}


def _boxes(shift_per_label=True):
    """Five boxes; the test shifts label k by k-1 voxels along x and drops label 2 (a miss)."""
    reference = np.zeros((10, 20, 40), np.uint8)
    test = np.zeros_like(reference)
    for label in NAMES:
        x = 7 * (label - 1)
        reference[2:8, 4:14, x:x + 5] = label
        if label != 2:
            shift = label - 1 if shift_per_label else 0
            test[2:8, 4:14, x + shift:x + shift + 5] = label
    return LabelImage(reference, (2.0, 1.0, 1.0), names=NAMES), LabelImage(test, (2.0, 1.0, 1.0), names=NAMES)


@pytest.fixture(scope="module")
def result():
    reference, test = _boxes()
    return segmetrics.compare(reference, test, metrics="overlap,distance")


def _render(result, width, **options) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for part in result_tables(result, console, **options):
        console.print(part)
    return console.file.getvalue()


def _rows(text) -> dict:
    """``{structure: [cells]}`` of the first table in ``text`` (rows start with a structure name)."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and cells[0] in NAMES.values() and cells[0] not in rows:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("width", [80, 200])
def test_table_fits_the_width_one_row_per_structure_names_whole(result, width):
    text = _render(result, width)
    assert max(len(line) for line in text.splitlines()) <= width
    rows = _rows(text)
    assert list(rows) == list(NAMES.values())  # every name on one line, unbroken, in input order
    header = next(line.split() for line in text.splitlines() if line.split()[:1] == ["structure"])
    assert header[1:4] == ["status", "Dice", "HD95_mm"]  # status shown because of the miss; main metrics first
    assert "hdp_mm" not in text and "HDp_mm" not in text  # a repeat of HD95 at the default percentile
    if width == 80:
        assert "more metrics not shown" in text
    wide_header = set(header)
    assert len(wide_header) >= (9 if width == 200 else 4)


def test_wide_shows_every_metric_in_column_groups_that_fit(result):
    text = _render(result, 80, wide=True)
    assert max(len(line) for line in text.splitlines()) <= 80
    headings = {word for line in text.splitlines() if line.split()[:1] == ["structure"] for word in line.split()}
    assert {"Dice", "IoU", "HD_mm", "HD95_mm", "ASSD_mm", "MASD_mm", "NSD", "Vref_ml", "FN_ml", "MDtr_mm"} <= headings
    assert "more metrics not shown" not in text


def test_sort_puts_the_worst_first_by_the_metric_direction(result):
    by_dice = list(_rows(_render(result, 120, sort="dice")))
    dice = {s.structure: s.value("dice") for s in result.structures}
    assert by_dice == sorted(dice, key=dice.get)  # higher is better: lowest first
    assert by_dice[0] == "lung_middle_lobe_right"
    by_hd = list(_rows(_render(result, 120, sort="hd95_mm")))
    assert by_hd[0] == "lung_middle_lobe_right"  # inf (missed) is the worst distance
    hd = {s.structure: s.value("hd95_mm") for s in result.structures if math.isfinite(s.value("hd95_mm"))}
    assert by_hd[1:] == sorted(hd, key=hd.get, reverse=True)


def test_sort_by_an_unselected_metric_is_refused_before_work(tmp_path, capsys):
    reference, test = _boxes()
    paths = []
    for name, image in (("ref.nii.gz", reference), ("test.nii.gz", test)):
        sitk.WriteImage(image.to_sitk(), str(tmp_path / name))
        paths.append(str(tmp_path / name))
    assert main(["compare", *paths, "--metrics", "dice", "--sort", "hd95_mm"]) == 2
    assert "--sort hd95_mm" in capsys.readouterr().err


def test_header_names_the_surface_mode_and_footer_lists_misses():
    reference, test = _boxes()
    deepmind = segmetrics.compare(reference, test, metrics="dice,hd95_mm", params=Parameters(surface_mode="deepmind"))
    text = _render(deepmind, 100)
    assert "surface mode deepmind" in text.splitlines()[0]
    assert "test_empty: 1 missed by the test (reference only): lung_middle_lobe_right" in " ".join(text.split())


@pytest.mark.parametrize("value, unit, voxel, shown", [
    (0.000108, "mm", 3.0, "0.0"),  # the false precision: HD95 on a 3 mm grid (step 0.03 mm: 0.1 shown)
    (0.000108, "mm", 1.0, "0.00"),  # 1 mm voxels: step 0.01 mm
    (1.8534, "mm", 2.5, "1.9"),  # step 0.025 mm: 0.01 would be finer
    (0.0123456, "mm", 0.5, "0.01"),  # step 0.005 mm: 0.01 is the finest power of ten not below it
    (483.6, "mm", 3.0, "484"),  # 3 significant digits
    (1.8534, "mm", 0.8, "1.85"),
    (0.0123456, "mm", 0.1, "0.012"),  # 0.1 mm voxels: step 0.001 mm stops at 2 significant digits
    (0.0123456, "mm", 0.01, "0.0123"),  # 0.01 mm voxels: 3 significant digits
    (0.007302, "1", None, "0.007"),  # ratios: 3 decimals
    (0.83333, "1", None, "0.833"),
    (math.inf, "mm", 1.0, "inf"),
    (math.nan, "1", None, "–"),
    (1.0, "count", None, "1"),  # a lesion count: no decimals
    (12.0, "count", None, "12"),
    (4 / 3, "count", None, "1.33"),  # a mean of counts keeps 3 significant digits
])
def test_display_rounding_rule(value, unit, voxel, shown):
    assert display_value(value, unit, voxel) == shown


def test_files_keep_full_precision_and_the_wide_csv_has_one_row_per_structure(result, tmp_path, capsys):
    reference, test = _boxes()
    paths = []
    for name, image in (("ref.nii.gz", reference), ("test.nii.gz", test)):
        sitk.WriteImage(image.to_sitk(), str(tmp_path / name))
        paths.append(str(tmp_path / name))
    out = tmp_path / "wide.csv"
    assert main(["compare", *paths, "--metrics", "dice,hd95_mm", "--format", "csv", "--layout", "wide",
                 "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["structure", "reference_label", "test_label", "status", "dice", "hd95_mm"]
    assert [r["structure"] for r in rows] == ["1", "2", "3", "4", "5"]  # files without names: label values
    # box 3 shifted by 2 voxels along x (5 wide): overlap 3 of 5 columns, Dice = 3/5 exactly
    assert float(rows[2]["dice"]) == pytest.approx(0.6, abs=1e-12)
    assert rows[1]["status"] == "test_empty" and rows[1]["hd95_mm"] == "inf"
    assert main(["compare", *paths, "--metrics", "dice", "--format", "wide-csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "structure,reference_label,test_label,status,dice"
    sidecar = json.loads((tmp_path / "wide.csv.provenance.json").read_text())
    assert sidecar["provenance"]["inputs"]["reference"]["path"] == str((tmp_path / "ref.nii.gz").resolve())


def test_json_provenance_names_version_time_inputs_and_settings(tmp_path):
    reference, test = _boxes()
    paths = []
    for name, image in (("ref.nii.gz", reference), ("test.nii.gz", test)):
        sitk.WriteImage(image.to_sitk(), str(tmp_path / name))
        paths.append(tmp_path / name)
    out = tmp_path / "out.json"
    before = datetime.now(timezone.utc).replace(microsecond=0)
    assert main(["compare", *map(str, paths), "--metrics", "dice", "--nsd-tolerance", "1.5", "--format", "json",
                 "-o", str(out)]) == 0
    provenance = json.loads(out.read_text())["provenance"]
    assert provenance["version"] == segmetrics.__version__
    created = datetime.fromisoformat(provenance["created_utc"].replace("Z", "+00:00"))
    assert before <= created <= datetime.now(timezone.utc)
    assert provenance["command"].startswith("segmetrics compare ") and "--nsd-tolerance 1.5" in provenance["command"]
    for side, path in zip(("reference", "test"), paths):
        entry = provenance["inputs"][side]
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["size_bytes"] == path.stat().st_size
    assert provenance["settings"]["params"]["nsd_tolerance_mm"] == 1.5
    assert provenance["grid"]["spacing_mm_zyx"] == [2.0, 1.0, 1.0]


def test_api_provenance_and_resampling_notes_reach_every_format():
    reference, test = _boxes()
    moved = LabelImage(test.array, test.spacing, origin=(0.0, 0.0, 6.0), names=NAMES)  # 3 slices out of view
    result = segmetrics.compare(reference, moved, metrics="dice", resample_to="reference")
    assert result.provenance["inputs"]["reference"] == {"in_memory": "segmetrics.spatial.geometry.LabelImage"}
    warning = next(note for note in result.notes if note.startswith("warning:"))
    # test slice k lies at z = 6 + 2k mm; foreground k = 2..7 -> 10..20 mm; the reference's 10 slices of
    # 2 mm cover z in [-1, 19) mm: only k = 7 falls outside, 1 of 6 equal slices
    total, outside = foreground_outside(moved, reference)
    assert outside / total == pytest.approx(1 / 6)
    assert "16.7 %" in warning
    from segmetrics.outputs.tables import result_json

    assert json.loads(result_json(result))["notes"] == result.notes


def test_resampling_the_force_split_pair_warns_how_much_was_cropped(data_dir):
    folder = data_dir / "totalsegmentator"
    reference, test = folder / "example_seg_fast.nii.gz", folder / "example_seg_fast_force_split.nii.gz"
    with pytest.raises(segmetrics.GeometryMismatchError, match="would discard all of '5'"):  # only the selected structure decides
        segmetrics.compare(reference, test, metrics="dice", labels=[5], resample_to="reference")
    result = segmetrics.compare(reference, test, metrics="dice", labels=[5], resample_to="reference",
                                input_policy=segmetrics.InputPolicy(allow_crop=True))  # the cropping asked for
    # independent truth: same origin, spacing and direction, so the reference grid keeps test slices z < 30
    ref_image, test_image = sitk.ReadImage(str(reference)), sitk.ReadImage(str(test))
    assert ref_image.GetOrigin() == test_image.GetOrigin() and ref_image.GetSpacing() == test_image.GetSpacing()
    array = sitk.GetArrayFromImage(test_image)
    kept = np.count_nonzero(array[:ref_image.GetSize()[2]] == 5) / np.count_nonzero(array == 5)  # the selected label
    warning = next(note for note in result.notes if note.startswith("warning:"))
    assert f"{100 * (1 - kept):.1f} %" in warning


def test_to_dataframe_long_and_wide(result):
    pd = pytest.importorskip("pandas")
    wide = result.to_dataframe()
    metrics = result.metrics()
    assert wide.shape == (5, 4 + len(metrics)) and list(wide["structure"]) == list(NAMES.values())
    assert wide.set_index("structure").loc["small_bowel", "dice"] == pytest.approx(0.6)
    long = result.to_dataframe("long")
    assert long.shape == (5 * len(metrics), 8)
    assert long.attrs["provenance"]["version"] == segmetrics.__version__
    assert isinstance(wide, pd.DataFrame)
    with pytest.raises(ValueError, match="layout"):
        result.to_dataframe("tall")


def _oblique_nifti(tmp_path):
    """A NIfTI file with anisotropic voxels, a flipped axis and an origin: read by SimpleITK and nibabel."""
    array = np.zeros((6, 8, 10), np.uint8)  # (z, y, x)
    array[1:4, 2:6, 3:9] = 1
    array[4, 7, 9] = 2
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.8, 1.2, 2.5))
    image.SetOrigin((10.0, -20.0, 30.0))
    image.SetDirection((1, 0, 0, 0, -1, 0, 0, 0, 1))
    path = tmp_path / "oblique.nii.gz"
    sitk.WriteImage(image, str(path))
    return path


def _same_geometry(image: LabelImage, expected: LabelImage):
    np.testing.assert_array_equal(image.array, expected.array)
    np.testing.assert_allclose(image.spacing, expected.spacing, atol=1e-5)
    np.testing.assert_allclose(image.origin, expected.origin, atol=1e-4)
    np.testing.assert_allclose(image.direction, expected.direction, atol=1e-6)


def test_nibabel_image_gives_the_geometry_simpleitk_reads(tmp_path):
    nib = pytest.importorskip("nibabel")
    path = _oblique_nifti(tmp_path)
    expected = LabelImage.from_sitk(sitk.ReadImage(str(path)))
    _same_geometry(as_label_image(nib.load(str(path))), expected)
    result = segmetrics.compare(nib.load(str(path)), str(path), metrics="dice")  # mixed inputs share one grid
    assert result["1"].value("dice") == 1.0


class MetaTensorStandIn:
    """What MONAI's ``MetaTensor`` offers this package: channel-first data (``__array__``) and an ``affine``.

    MONAI needs torch (hundreds of MB), so the tests use this stand-in with MONAI's conventions:
    ``LoadImage(ensure_channel_first=True)`` gives data ``(1, i, j, k)`` and a RAS affine.
    """

    def __init__(self, data, affine):
        self.data, self.affine = data, affine

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.data, dtype=dtype)


def test_metatensor_like_input_reads_spacing_and_orientation_from_its_affine(tmp_path):
    nib = pytest.importorskip("nibabel")  # gives the RAS affine and (i, j, k) data MONAI would load
    path = _oblique_nifti(tmp_path)
    loaded = nib.load(str(path))
    tensor = MetaTensorStandIn(np.asarray(loaded.dataobj)[None], loaded.affine)
    _same_geometry(as_label_image(tensor), LabelImage.from_sitk(sitk.ReadImage(str(path))))


def test_array_without_spacing_message_names_the_image_options():
    with pytest.raises(ValueError, match="nibabel or MONAI"):
        as_label_image(np.zeros((3, 4, 5), np.uint8))


def _write_pair(tmp_path):
    reference, test = _boxes()
    paths = []
    for name, image in (("ref.nii.gz", reference), ("test.nii.gz", test)):
        sitk.WriteImage(image.to_sitk(), str(tmp_path / name))
        paths.append(str(tmp_path / name))
    return paths


def test_compare_and_batch_give_the_same_class_mean_without_a_penalty_by_default(tmp_path):
    from segmetrics.evaluation.aggregate import OVERALL
    from segmetrics.evaluation.batch import Case, run_batch
    from segmetrics.report import report_batch

    ref_path, test_path = _write_pair(tmp_path)
    cases = [Case("c1", ref_path, test_path)]
    run_batch(cases, tmp_path / "out", metrics="dice,hd95_mm", workers=0, progress=False)
    agg, html_path = report_batch(tmp_path / "out", cases, tmp_path / "report", job={"metrics": "dice,hd95_mm"})
    direct = segmetrics.compare(ref_path, test_path, metrics="dice,hd95_mm").class_means()
    for metric in ("dice", "hd95_mm"):
        assert agg.row(OVERALL, metric)["class_mean"] == pytest.approx(direct[metric]["mean"], rel=1e-12)
    row = agg.row(OVERALL, "hd95_mm")
    # the miss (label 2) is left out of the mean, counted beside it, and listed; nothing is penalised
    assert (row["n_used"], row["n_test_empty"], row["n_penalised"]) == (4, 1, 0)
    assert agg.misses == [{"case_id": "c1", "structure": "2", "status": "test_empty"}]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["provenance"]["version"] == segmetrics.__version__
    page = html_path.read_text()
    assert "c1 / 2 (test_empty)" in page and "No empty-mask penalty (default)" in page
    # a resumed run with the same settings is accepted although run.json holds a provenance block
    run_batch(cases, tmp_path / "out", metrics="dice,hd95_mm", workers=0, progress=False)


def test_a_penalty_is_applied_only_when_asked_for_with_a_stated_constant(tmp_path):
    from segmetrics.evaluation.aggregate import OVERALL, aggregate

    records = [{"case_id": "a", "structure": s, "metric": "hd95_mm", "value": v, "unit": "mm", "status": st}
               for s, v, st in (("liver", 2.0, "ok"), ("lobe", math.inf, "test_empty"), ("bowel", 4.0, "ok"))]
    default = aggregate(records).row(OVERALL, "hd95_mm")
    assert (default["mean"], default["n_penalised"], default["n_test_empty"]) == (3.0, 0, 1)
    brats = aggregate(records, penalty=373.13).row(OVERALL, "hd95_mm")
    assert brats["mean"] == pytest.approx((2.0 + 373.13 + 4.0) / 3) and brats["n_penalised"] == 1


def test_frames_takes_the_reference_folder_first_or_named(tmp_path, capsys):
    from PIL import Image

    reference, prediction = np.zeros((8, 8), np.uint8), np.zeros((8, 8), np.uint8)
    reference[1:5, 1:5] = 1  # frame a: 16 reference pixels, 8 of them predicted (IoU 0.5)
    prediction[1:5, 1:3] = 1
    for folder, frames in (("gt", {"a": reference, "b": 0 * reference}), ("pred", {"a": prediction, "b": reference})):
        (tmp_path / folder).mkdir()
        for name, frame in frames.items():
            Image.fromarray(frame).save(tmp_path / folder / f"{name}.png")
    # frame b has an empty reference: the challenge IoU skips it when "gt" is the reference (0.5); read the
    # other way round it would score frame b 0 and give 0.25
    outputs = []
    for args in ([str(tmp_path / "gt"), str(tmp_path / "pred")],
                 ["--test", str(tmp_path / "pred"), "--reference", str(tmp_path / "gt")]):
        out = tmp_path / f"out{len(outputs)}.json"
        assert main(["frames", *args, "--format", "json", "-o", str(out)]) == 0
        outputs.append(json.loads(out.read_text()))
    assert outputs[0]["challenge_iou"] == outputs[1]["challenge_iou"] == pytest.approx(0.5)
    assert main(["frames", str(tmp_path / "gt"), "--test", str(tmp_path / "pred")]) == 2
    assert "either as positionals" in capsys.readouterr().err


def test_batch_keeps_the_resampling_notes_and_the_report_shows_them(tmp_path):
    from segmetrics.evaluation.batch import Case, read_case_log, run_batch
    from segmetrics.report import report_batch

    reference, test = _boxes()
    moved = LabelImage(test.array, test.spacing, origin=(0.0, 0.0, 6.0))  # 1 of 6 foreground slices leaves the grid
    sitk.WriteImage(reference.to_sitk(), str(tmp_path / "ref.nii.gz"))
    sitk.WriteImage(moved.to_sitk(), str(tmp_path / "moved.nii.gz"))
    cases = [Case("shifted", str(tmp_path / "ref.nii.gz"), str(tmp_path / "moved.nii.gz"))]
    run_batch(cases, tmp_path / "out", metrics="dice", resample_to="reference", workers=0, progress=False)
    notes = read_case_log(tmp_path / "out")["shifted"]["notes"]
    assert any(note.startswith("warning: 16.7 % of the test foreground") for note in notes)
    job = {"metrics": "dice", "resample_to": "reference"}
    _, html_path = report_batch(tmp_path / "out", cases, tmp_path / "report", job=job)
    page = html_path.read_text()
    assert page.index("Notes on the inputs") < page.index("id='contents'") and "warning: 16.7 %" in page


def test_names_that_look_like_rich_markup_are_shown_as_written():
    """'[/bold]' in a name raised rich's MarkupError; '[red]lung[/red]' lost its brackets."""
    names = {1: "[/bold]x", 2: "[red]lung[/red]"}
    reference = np.zeros((3, 8, 8), np.uint8)
    reference[1, 1:4, 1:4], reference[1, 5:7, 5:7] = 1, 2
    result = segmetrics.compare(LabelImage(reference, (1.0, 1.0, 1.0), names=names),
                                LabelImage(reference, (1.0, 1.0, 1.0), names=names), metrics="dice")
    text = _render(result, 80)
    assert "[/bold]x" in text and "[red]lung[/red]" in text
