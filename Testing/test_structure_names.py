"""Structure names as departments write them (inputs/structure_names.py): TG-263 matching rules."""
import csv
import json

import pytest

from segmetrics.inputs.structure_names import (ABBREVIATIONS, TG263_TABLE, Ambiguity, match_structures,
                                               read_synonyms, tg263_names, words)


def matched(reference, test, synonyms=None):
    return {m.test: (m.reference, m.rule) for m in match_structures(reference, test, synonyms)[0]}


def test_case_separators_and_word_breaks():
    assert words("SpinalCord_L") == ["spinal", "cord", "l"]
    assert matched(["SpinalCord", "Lung_L"], ["spinal cord", "LUNG-L"]) == {
        "spinal cord": ("SpinalCord", "case and separators"), "LUNG-L": ("Lung_L", "case and separators")}


@pytest.mark.parametrize("name", ["Lt Lung", "Left Lung", "L_Lung", "lung left", "LUNG_LT", "left-lung"])
def test_laterality_words_at_either_end(name):
    assert matched(["Lung_L", "Lung_R", "Lungs"], [name]) == {name: ("Lung_L", "laterality")}


def test_right_is_never_left_and_a_side_inside_a_name_is_no_side():
    assert matched(["Lung_L"], ["Rt Lung"]) == {}
    assert matched(["Parotid_R"], ["R Parotid"]) == {"R Parotid": ("Parotid_R", "laterality")}
    assert matched(["Lung_L"], ["Lung L Lower"]) == {}


def test_common_abbreviations_and_the_tg263_descriptions():
    reference = ["SpinalCord", "Esophagus", "Brainstem", "Bladder", "Bone_Mastoid_L", "Bowel_Large"]
    test = ["Cord", "Esoph", "Brain Stem", "Urinary Bladder", "Left Mastoid Bone", "Large Bowel"]
    assert matched(reference, test) == {
        "Cord": ("SpinalCord", "TG-263"), "Esoph": ("Esophagus", "TG-263"),
        "Brain Stem": ("Brainstem", "case and separators"), "Urinary Bladder": ("Bladder", "TG-263"),
        "Left Mastoid Bone": ("Bone_Mastoid_L", "TG-263"), "Large Bowel": ("Bowel_Large", "TG-263")}
    assert matched(["SpinalCord"], ["SC"]) == {"SC": ("SpinalCord", "TG-263")}


def test_ambiguous_matches_are_listed_and_left_unpaired():
    matches, ambiguities = match_structures(["Lung_L"], ["L lung", "Left Lung"])
    assert matches == [] and ambiguities == [Ambiguity(("L lung", "Left Lung"), ("Lung_L",), "laterality")]
    matches, ambiguities = match_structures(["SpinalCord", "SC"], ["Cord"])
    assert matches == [] and ambiguities == [Ambiguity(("Cord",), ("SpinalCord", "SC"), "TG-263")]


def test_user_synonyms_come_before_the_built_in_table(tmp_path):
    (tmp_path / "synonyms.json").write_text(json.dumps({"Heart": ["Coeur"], "Esophagus": ["Oeso"]}))
    synonyms = read_synonyms(tmp_path / "synonyms.json")
    assert matched(["Heart", "Esophagus"], ["COEUR", "oeso"], synonyms) == {
        "COEUR": ("Heart", "synonyms"), "oeso": ("Esophagus", "synonyms")}


def test_the_table_is_the_tg263_list():
    """The data file holds the TG-263 list; the table and the abbreviations lead to its names only."""
    with TG263_TABLE.open(newline="") as table:
        rows = list(csv.DictReader(line for line in table if not line.startswith("#")))
    names = {row["name"] for row in rows}
    assert len(rows) > 600 and {"Lung_L", "Parotid_R", "SpinalCord", "Heart", "Esophagus"} <= names
    assert set(ABBREVIATIONS.values()) <= names
    assert set(tg263_names().values()) <= names


def test_compare_reports_each_rule_and_the_ambiguous_names(tmp_path):
    from segmetrics import compare
    from test_dicom import rectangle, write_rtstruct

    square = [rectangle(0.5, 0.5, 10.5, 10.5, 0)]
    write_rtstruct(tmp_path / "ref.dcm", {"Lung_L": square, "SpinalCord": square, "Parotid_R": square})
    write_rtstruct(tmp_path / "test.dcm", {"Lt Lung": square, "SC": square, "R Parotid": square,
                                           "Right Parotid": square})
    result = compare(tmp_path / "ref.dcm", tmp_path / "test.dcm", metrics="dice")
    assert result["Lung_L"].value("dice") == 1.0 and result["SpinalCord"].value("dice") == 1.0
    assert "test structure 'Lt Lung' paired with reference 'Lung_L' (laterality)" in result.notes
    assert "test structure 'SC' paired with reference 'SpinalCord' (TG-263)" in result.notes
    assert ("ambiguous names left unpaired (laterality): test 'R Parotid', 'Right Parotid' and reference "
            "'Parotid_R'") in result.notes
    assert result["Parotid_R"].status == "test_empty"


@pytest.mark.parametrize("name", ["Lt Lung", "Lung_L", "Left Lung", "L_Lung", "LUNG LT", "lung-left", "Lung (L)"])
def test_every_way_of_writing_the_left_lung_pairs_with_it_and_never_with_the_right_or_both(name):
    paired = {test: reference for test, (reference, _) in matched(["Lung_L", "Lung_R", "Lungs"], [name]).items()}
    assert paired == ({} if name == "Lung_L" else {name: "Lung_L"})
    assert matched(["Lung_R", "Lungs"], [name]) == {}


@pytest.mark.parametrize("reference, test", [
    ("Parotid_R", "R Parotid"), ("Parotid_R", "Rt_Parotid"), ("Parotid_R", "Parotid Right"),
    ("Parotid_R", "Right Parotid Gland"), ("SpinalCord", "Spinal Cord"), ("SpinalCord", "SC"),
    ("SpinalCord", "Cord"), ("SpinalCord", "Spinal_Cord"), ("Esophagus", "Esoph"), ("Esophagus", "Oesophagus"),
    ("PTV_High", "PTV High"), ("Brainstem", "BrainStem"), ("Brainstem", "Brain Stem"),
    ("Femur_Head_L", "Lt Femoral Head"), ("Femur_Head_L", "Femoral Head Left"), ("OpticChiasm", "Chiasm")])
def test_names_as_departments_write_them(reference, test):
    assert test in matched([reference, "Parotid_L", "Femur_Head_R"], [test])
    assert matched([reference, "Parotid_L", "Femur_Head_R"], [test])[test][0] == reference


@pytest.mark.parametrize("reference, test", [
    ("Femur_Head_R", "Lt Femoral Head"), ("Parotid_L", "Right Parotid Gland"), ("Lung_L", "Lung_R"),
    ("Lung_L", "Lungs"), ("Lungs", "Lt Lung"), ("Femur_Neck_R", "Lt Femur Neck"), ("Femur_Neck_L", "Femur_Neck_R"),
    ("V_Iliac_L", "Common iliac vein Right"), ("Proc_Condyloid_R", "Condyloid process of mandible - Left"),
    ("Femur_Head_L", "Femoral Head")])
def test_no_rule_pairs_names_of_different_sides(reference, test):
    assert match_structures([reference], [test]) == ([], [])


def test_the_sides_in_the_tg263_list_are_read_from_the_names():
    """The list describes Femur_Neck_L as 'Femur Neck Right' (and V_Iliac_L, Proc_Condyloid_L alike): the name wins."""
    assert matched(["Femur_Neck_L"], ["Femur Neck Left"]) == {"Femur Neck Left": ("Femur_Neck_L", "laterality")}
    assert matched(["V_Iliac_R"], ["Right Common Iliac Vein"]) == {
        "Right Common Iliac Vein": ("V_Iliac_R", "TG-263")}


@pytest.mark.parametrize("test", ["PTV70", "PTV_70", "PTV_56", "PTV5600", "PTV", "CTV_5600", "CTV_7000", "PTV_High",
                                  "PTVp_7000", "PTV_7000_2", "Lt PTV_5600"])
def test_targets_never_pair_across_dose_levels(test):
    assert match_structures(["PTV_7000", "CTV_56"], [test]) == ([], [])
    assert matched(["PTV_7000", "PTV_5600"], ["PTV 7000"]) == {"PTV 7000": ("PTV_7000", "case and separators")}


def test_user_synonyms_come_before_every_built_in_rule(tmp_path):
    (tmp_path / "synonyms.json").write_text(json.dumps({"CTV_High": ["CTV1"], "Lung_L": ["Poumon gauche"]}))
    synonyms = read_synonyms(tmp_path / "synonyms.json")
    assert matched(["CTV_1", "CTV_High", "Lung_L"], ["CTV1", "Poumon gauche"], synonyms) == {
        "CTV1": ("CTV_High", "synonyms"), "Poumon gauche": ("Lung_L", "synonyms")}


def test_two_tg263_names_are_two_structures():
    """``VB_S`` (sacral vertebrae) and ``VBs`` (vertebral bodies) differ only by a separator."""
    assert match_structures(["VBs"], ["VB_S"]) == ([], []) and match_structures(["VB_S"], ["VBs"]) == ([], [])
    assert matched(["VB_S"], ["vb s"]) == {"vb s": ("VB_S", "case and separators")}
