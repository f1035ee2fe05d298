"""Structure-name synonyms in batches (issue 25): ``run_batch(synonyms=...)`` and ``segmetrics batch --synonyms``.

Two patients of DICOM folders: reference RT Structure Sets name their structures ``Heart`` and
``Esophagus``, the test ones ``Coeur`` and ``Oeso``, names no built-in rule pairs. Truth: the Dice
of the pixel masks the rectangles cover (pixel centres inside), counted by hand."""
import hashlib
import json

import numpy as np
import pytest

from segmetrics import compare
from segmetrics.cli import main
from segmetrics.evaluation.batch import match_folders, run_batch
from segmetrics.inputs.structure_names import synonym_map
from segmetrics.inputs.validation import ReadError
from segmetrics.spatial.geometry import LabelImage

pytest.importorskip("pydicom")
from pydicom.uid import generate_uid  # noqa: E402
from test_dicom import rectangle  # noqa: E402
from test_dicom_batch_synthetic import PLANES_MM, dice, square_mask, write_ct, write_structure_set  # noqa: E402

SYNONYMS = {"Heart": ["Coeur"], "Esophagus": ["Oeso"]}
#: Per patient: the planes and x range (mm) of each test structure; the references cover planes 1-3, x 3..15 mm.
TESTS = {"P1": {"Coeur": ([1, 2, 3], 7.0, 19.0), "Oeso": ([2, 3], 3.0, 15.0)},
         "P2": {"Coeur": ([1], 3.0, 15.0), "Oeso": ([1, 2, 3], 3.0, 11.0)}}
TEST_NAMES = {"Coeur": "Heart", "Oeso": "Esophagus"}


def rectangles(planes, x0, x1) -> list:
    return [rectangle(x0, 5.0, x1, 13.0, PLANES_MM[k]) for k in planes]


@pytest.fixture
def folders(tmp_path):
    """``(reference folder, test folder, synonyms file)``: a CT and a structure set per patient and side."""
    ref, test = tmp_path / "ref", tmp_path / "test"
    for patient, structures in TESTS.items():
        frame, series = generate_uid(), generate_uid()
        write_ct(ref / patient / "CT", patient, frame, series)
        write_structure_set(ref / patient / "rs.dcm", patient, frame, series,
                            {"Heart": rectangles([1, 2, 3], 3.0, 15.0), "Esophagus": rectangles([1, 2, 3], 3.0, 15.0)})
        write_structure_set(test / patient / "rs.dcm", patient, frame, series,
                            {name: rectangles(*where) for name, where in structures.items()})
    synonyms = tmp_path / "synonyms.json"
    synonyms.write_text(json.dumps(SYNONYMS))
    return ref, test, synonyms


def truth() -> dict:
    """``{(patient, reference structure): Dice}`` of the masks of :data:`TESTS` against the references'."""
    reference = square_mask([1, 2, 3])
    values = {(patient, TEST_NAMES[name]): dice(reference, square_mask(*where))
              for patient, structures in TESTS.items() for name, where in structures.items()}
    # pixel centres at even mm: y 6..12 (4 rows); x 4..14 (6 columns) for 3..15 mm, 8..18 for 7..19, 4..10 for 3..11
    assert values == pytest.approx({("P1", "Heart"): 2 * 48 / (72 + 72), ("P1", "Esophagus"): 2 * 48 / (72 + 48),
                                    ("P2", "Heart"): 2 * 24 / (72 + 24), ("P2", "Esophagus"): 2 * 48 / (72 + 48)},
                                   abs=1e-12)
    return values


def dice_records(output) -> dict:
    """``{(case id, structure): (value, status)}`` of the Dice records of a batch output folder."""
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    return {(r["case_id"], r["structure"]): (r["value"], r["status"]) for r in records if r["metric"] == "dice"}


def paired(output) -> dict:
    """The Dice of each pair of an output folder whose status is ``ok``."""
    return {key: value for key, (value, status) in dice_records(output).items() if status == "ok"}


def test_the_command_pairs_every_case_by_the_synonyms_and_describes_the_file(folders, tmp_path, capsys):
    ref, test, synonyms = folders
    out = tmp_path / "out"
    code = main(["batch", "--reference-dir", str(ref), "--test-dir", str(test), "-o", str(out), "--metrics", "dice",
                 "--synonyms", str(synonyms), "--workers", "0", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert paired(out) == pytest.approx(truth(), abs=1e-12)
    run = json.loads((out / "run.json").read_text())
    assert run["synonyms"] == {"heart": "Heart", "coeur": "Heart", "esophagus": "Esophagus", "oeso": "Esophagus"}
    assert run["provenance"]["inputs"]["synonyms"]["sha256"] == hashlib.sha256(synonyms.read_bytes()).hexdigest()
    log = [json.loads(line) for line in (out / "cases.jsonl").read_text().splitlines()]
    notes = {entry["case_id"]: entry["notes"] for entry in log}
    assert "test structure 'Coeur' paired with reference 'Heart' (synonyms)" in notes["P1"]


def test_without_the_synonyms_the_structures_stay_unpaired(folders, tmp_path):
    ref, test, _synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    summary = run_batch(cases, tmp_path / "out", metrics="dice", workers=0, progress=False)
    assert summary.failed == {}
    statuses = {key: status for key, (_value, status) in dice_records(tmp_path / "out").items()}
    assert statuses == {**{key: "test_empty" for key in truth()},
                        **{(patient, name): "reference_empty" for patient in TESTS for name in TEST_NAMES}}
    notes = json.loads((tmp_path / "out" / "cases.jsonl").read_text().splitlines()[0])["notes"]
    assert "unmatched structures, test only: 'Coeur', 'Oeso'" in notes


def test_a_resumed_run_with_other_synonyms_redoes_every_case(folders, tmp_path):
    ref, test, synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    out = tmp_path / "out"

    def run(given):
        return run_batch(cases, out, metrics="dice", workers=0, progress=False, synonyms=given).computed

    assert run(synonyms) == ["P1", "P2"]
    assert run(synonyms) == [] and run(json.loads((out / "run.json").read_text())["synonyms"]) == []
    heart_only = tmp_path / "heart.json"
    heart_only.write_text(json.dumps({"Heart": ["Coeur"]}))
    assert run(heart_only) == ["P1", "P2"]
    assert paired(out) == pytest.approx({key: value for key, value in truth().items() if key[1] == "Heart"}, abs=1e-12)
    assert json.loads((out / "run.json").read_text())["synonyms"] == {"heart": "Heart", "coeur": "Heart"}
    assert run(None) == ["P1", "P2"] and paired(out) == {}
    assert "synonyms" not in json.loads((out / "run.json").read_text())


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("{not json", "expected a JSON object"), ('{"Heart": "Coeur"}', "expected a JSON object"),
    ('["Heart"]', "expected a JSON object")])
def test_a_bad_synonyms_file_is_refused_before_any_case_runs(folders, tmp_path, capsys, content, message):
    ref, test, _synonyms = folders
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    out = tmp_path / "out"
    code = main(["batch", "--reference-dir", str(ref), "--test-dir", str(test), "-o", str(out), "--synonyms", str(bad),
                 "--workers", "0", "--no-progress"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and message in error and str(bad) in error
    assert not (out / "cases.jsonl").exists()
    cases, _unmatched, _skipped = match_folders(ref, test)
    with pytest.raises(ReadError, match=message):
        run_batch(cases, tmp_path / "python", workers=0, progress=False, synonyms=bad)
    assert not (tmp_path / "python").exists()


def test_the_file_its_content_and_its_map_pair_alike(folders, tmp_path):
    """``{"Heart": ["Coeur"]}`` given as a dict was refused (or, to compare, paired nothing): the file's
    content, the file and :func:`synonym_map`'s map are one set of synonyms; a malformed dict is one line."""
    ref, test, synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    records = {}
    for name, given in (("file", synonyms), ("content", SYNONYMS), ("map", synonym_map(SYNONYMS))):
        run_batch(cases, tmp_path / name, metrics="dice", workers=0, progress=False, synonyms=given)
        records[name] = dice_records(tmp_path / name)
    assert records["file"] == records["content"] == records["map"] and len(paired(tmp_path / "file")) == len(truth())
    with pytest.raises(ReadError, match=r"synonyms: expected a JSON object of names and their synonyms"):
        run_batch(cases, tmp_path / "bad", workers=0, progress=False, synonyms={"Heart": 3})
    assert not (tmp_path / "bad").exists()
    mask = np.zeros((3, 4, 4), np.uint8)
    mask[1, 1:3, 1:3] = 1
    heart, coeur = LabelImage(mask, (1.0, 1.0, 1.0), names={1: "Heart"}), LabelImage(mask, (1.0, 1.0, 1.0), names={1: "Coeur"})
    for given in (SYNONYMS, synonyms):
        (structure,) = compare(heart, coeur, metrics="dice", synonyms=given).structures
        assert structure.get("dice").value == 1.0


def test_a_child_process_gives_the_records_of_this_process(folders, tmp_path):
    ref, test, synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    for workers in (0, 1):
        summary = run_batch(cases, tmp_path / f"workers{workers}", metrics="dice", workers=workers, progress=False,
                            synonyms=synonyms)
        assert summary.failed == {}
    assert paired(tmp_path / "workers0") == pytest.approx(truth(), abs=1e-12)
    child, this = (tmp_path / f"workers{workers}" / "results.jsonl" for workers in (1, 0))
    assert child.read_bytes() == this.read_bytes()


def test_dask_workers_give_the_records_of_this_process(folders, tmp_path):
    pytest.importorskip("distributed")
    ref, test, synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    summary = run_batch(cases, tmp_path / "dask", metrics="dice", workers=1, scheduler="local", progress=False,
                        synonyms=synonyms)
    assert summary.failed == {} and paired(tmp_path / "dask") == pytest.approx(truth(), abs=1e-12)


def test_the_report_recomputes_the_worst_pair_with_the_synonyms(folders, tmp_path):
    """The report's detailed worst cases are compared again: with the run's synonyms, or the pair is not found."""
    from segmetrics.evaluation.aggregate import aggregate
    from segmetrics.evaluation.batch import read_results
    from segmetrics.inputs.structure_names import read_synonyms
    from segmetrics.report import worst_details

    ref, test, synonyms = folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    run_batch(cases, tmp_path / "out", metrics="dice", workers=0, progress=False, synonyms=synonyms)
    agg = aggregate(read_results(tmp_path / "out"), case_ids=[case.case_id for case in cases])
    details = worst_details(agg, cases, {"synonyms": read_synonyms(synonyms)}, n=1, metric="dice")
    (title, _reference, structure), = details
    assert title.startswith("P2 / Heart") and structure.structure == "Heart"
    assert structure.test_label is not None and structure.status == "ok"  # paired with Coeur
