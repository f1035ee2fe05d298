"""Command-line options that must never override one another silently (issue 24, round two)."""
import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics.cli import main


@pytest.fixture
def box_pair(tmp_path):
    """Two 1 mm label maps: a box and the same box shifted by one voxel along x."""
    paths = []
    for name, shift in (("ref.nii.gz", 0), ("test.nii.gz", 1)):
        array = np.zeros((8, 12, 12), np.uint8)
        array[2:6, 3:9, 3 + shift:9 + shift] = 1
        sitk.WriteImage(sitk.GetImageFromArray(array), str(tmp_path / name))
        paths.append(str(tmp_path / name))
    return paths


@pytest.mark.parametrize("params", ['{"msi_il": 3}', '{"msi_ol": 2, "nsd_tolerance_mm": 1}'])
def test_msi_preset_and_msi_levels_in_params_are_refused_together(box_pair, params, capsys):
    """--params '{"msi_il": 3}' --msi-preset tight scored il 1 (the preset's), exit 0."""
    assert main(["compare", *box_pair, "--metrics", "msi", "--msi-preset", "tight", "--params", params,
                 "--format", "csv"]) == 2
    assert "--msi-preset tight sets the MSI levels" in capsys.readouterr().err


def test_the_table_header_does_not_call_preset_levels_default(box_pair, capsys):
    """'MSI il 1 / ol 10 (default)' under --msi-preset tight read as if the levels were the defaults:
    '(default)' named the convention."""
    pytest.importorskip("rich")  # the terminal table
    assert main(["compare", *box_pair, "--metrics", "msi", "--msi-preset", "tight"]) == 0
    header = " ".join(capsys.readouterr().out.split())
    assert "MSI il 1 / ol 10 (default convention): σ 10 mm inside / 1 mm outside" in header
