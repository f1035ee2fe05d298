"""The MSI's Gaussian width σ = 10 / level beside every MSI value, and the named MSI levels (presets)."""
import csv
import json

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.cli import MSI_PRESET_HELP, main
from segmetrics.outputs.tables import msi_sigma
from segmetrics.registry import MSI_PRESETS, ParameterError, Parameters


@pytest.fixture
def shifted_box(tmp_path):
    """A 6-voxel box and the same box shifted by 3 mm along x (1 mm voxels): written as NIfTI."""
    reference = np.zeros((10, 14, 16), np.uint8)
    reference[2:8, 4:10, 4:10] = 1
    test = np.roll(reference, 3, axis=2)
    paths = []
    for name, array in (("ref.nii.gz", reference), ("test.nii.gz", test)):
        sitk.WriteImage(sitk.GetImageFromArray(array), str(tmp_path / name))
        paths.append(str(tmp_path / name))
    return paths


def test_sigma_is_ten_over_the_level_in_the_values_units():
    assert msi_sigma({"il": 1.0, "ol": 1.0, "units": "mm"}) == "σ 10 mm"
    assert msi_sigma({"il": 1.0, "ol": 10.0, "units": "mm"}) == "σ 10 mm inside / 1 mm outside"
    assert msi_sigma({"il": 3.0, "ol": 4.0, "units": "pixel"}, compact=True) == "σ3.33|2.5px"


def test_tight_preset_is_the_msi_papers_clinical_example():
    # Fazekas et al. 2025, clinical example (prostate slice): il = 1, ol = 10.
    assert MSI_PRESETS["tight"] == (1.0, 10.0) and MSI_PRESETS["default"] == (1.0, 1.0)
    tight = Parameters.from_msi_preset("tight", nsd_tolerance_mm=1.0)
    assert (tight.msi_il, tight.msi_ol, tight.nsd_tolerance_mm) == (1.0, 10.0, 1.0)
    assert Parameters.from_msi_preset("default") == Parameters()
    with pytest.raises(ParameterError, match="one of default, tight"):
        Parameters.from_msi_preset("strict")
    with pytest.raises(ParameterError, match="leave out msi_ol"):
        Parameters.from_msi_preset("tight", msi_ol=3.0)
    assert set(MSI_PRESET_HELP) == set(MSI_PRESETS)
    for name, (il, ol) in MSI_PRESETS.items():
        assert MSI_PRESET_HELP[name].startswith(f"il {il:g}, ol {ol:g} (σ {10 / il:g} mm inside")


def test_cli_preset_sets_the_levels_and_every_output_shows_sigma(shifted_box, tmp_path, capsys):
    pytest.importorskip("rich")  # the terminal table
    reference, test = shifted_box
    out = tmp_path / "out.json"
    assert main(["compare", reference, test, "--metrics", "msi", "--msi-preset", "tight", "--format", "json",
                 "-o", str(out)]) == 0
    records = {r["metric"]: r for r in json.loads(out.read_text())["records"]}
    assert (records["msi"]["params"]["il"], records["msi"]["params"]["ol"]) == (1.0, 10.0)
    expected = segmetrics.compare(reference, test, metrics="msi", params=Parameters(msi_il=1, msi_ol=10))
    assert records["msi"]["value"] == pytest.approx(expected["1"].value("msi"))
    # the 3 mm shift costs far more under the tight outside level than under the default
    assert records["msi"]["value"] < segmetrics.compare(reference, test, metrics="msi")["1"].value("msi") - 0.2

    assert main(["compare", reference, test, "--metrics", "dice,msi", "--msi-preset", "tight"]) == 0
    table = capsys.readouterr().out
    assert "MSI σ10|1mm" in table and "MSI3D σ10|1mm" in table and "σ 10 mm inside / 1 mm outside" in table
    assert main(["compare", reference, test, "--metrics", "msi", "--msi-preset", "tight", "--msi-ol", "3"]) == 2
    assert "--msi-preset tight sets the MSI levels" in capsys.readouterr().err

    slices = tmp_path / "slices.csv"
    assert main(["compare", reference, test, "--metrics", "msi", "--slices", str(slices), "--format", "csv"]) == 0
    rows = list(csv.DictReader(open(slices, newline="", encoding="utf-8")))
    assert rows and {row["msi_sigma"] for row in rows} == {"σ 10 mm"}


def test_batch_report_and_terminal_summary_show_sigma(shifted_box, tmp_path, capsys):
    for package in ("rich", "pandas", "jinja2", "matplotlib"):  # the terminal summary and the report
        pytest.importorskip(package)
    reference, test = shifted_box
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(f"case_id,reference,test\na,{reference},{test}\n")
    assert main(["batch", "--manifest", str(manifest), "-o", str(tmp_path / "out"), "--metrics", "dice,msi",
                 "--msi-il", "2", "--no-progress", "--report", str(tmp_path / "report"), "--workers", "0"]) == 0
    terminal = capsys.readouterr().out
    assert "MSI σ5|10mm" in terminal
    report = (tmp_path / "report" / "report.md").read_text()
    overall = report.split("## Overall")[1].split("##")[0]
    msi_row = next(line for line in overall.splitlines() if "[msi (σ 5 mm inside / 10 mm outside)](#msi)" in line)
    assert msi_row.split("|")[2].strip() == "1"  # the unit column follows the labelled name
    assert "Gaussians of width σ 5 mm inside / 10 mm outside" in report
