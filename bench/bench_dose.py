"""Dose metrics of 30 structures on a 512 × 512 × 150 dose grid through ``segmetrics.compare`` (goal: < 2 s).

A planning-CT-like grid of 150 slices of 512 × 512 pixels (2.5 × 0.98 × 0.98 mm, z, y, x) holds 30
ellipsoids (radii 6 to 60 mm, about 4 % of the voxels) as the reference label map; the test is the
same shifted by one voxel in x and y. The dose grid has the same size and spacing, shifted by half a
voxel (so every structure voxel is interpolated), holding a smooth field of 0-70 Gy. Prints the
first call of ``compare(..., metrics="dose", dose=..., dose_levels_gy=(20, 30))`` in the process
(the metric modules imported in it) and the best of ``--repeats`` further calls, the DVHs
included, then the same with the RTDOSE read from a file (written here with pydicom), then with
the dose grid rotated 1° about z (interpolated voxel by voxel, not axis by axis). Checks
every structure's reference Dmean and volume against scipy's trilinear interpolation at its
voxel centres.

Usage: python bench/bench_dose.py [--repeats 3]
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np

import segmetrics
from common import best_time
from segmetrics.inputs.readers.rtdose import DoseGrid
from segmetrics.spatial.geometry import LabelImage

SHAPE = (150, 512, 512)
SPACING = (2.5, 0.98, 0.98)
STRUCTURES = 30


def structures(rng) -> np.ndarray:
    """A label map of :data:`STRUCTURES` ellipsoids at random places (later ones over earlier ones)."""
    labels = np.zeros(SHAPE, np.uint8)
    axes = [np.arange(n) * s for n, s in zip(SHAPE, SPACING)]
    for label in range(1, STRUCTURES + 1):
        radii = rng.uniform(6, 60, 3) * (0.5 if label % 3 else 1.0)
        centre = [rng.uniform(r, n * s - r) for r, n, s in zip(radii, SHAPE, SPACING)]
        box = tuple(slice(max(0, int((c - r) / s)), int((c + r) / s) + 2) for c, r, s in zip(centre, radii, SPACING))
        z, y, x = np.meshgrid(*(a[b] for a, b in zip(axes, box)), indexing="ij")
        inside = ((z - centre[0]) / radii[0]) ** 2 + ((y - centre[1]) / radii[1]) ** 2 + \
                 ((x - centre[2]) / radii[2]) ** 2 <= 1
        labels[box][inside] = label
    return labels


def dose_field() -> np.ndarray:
    """A smooth dose (Gy, float32 to keep memory low) on the grid: a 70 Gy peak falling off."""
    z, y, x = (np.arange(n, dtype=np.float32) * s for n, s in zip(SHAPE, SPACING))
    centre = [n * s / 2 for n, s in zip(SHAPE, SPACING)]
    return (70 * np.exp(-(((z - centre[0]) / 120) ** 2))[:, None, None]
            * np.exp(-(((y - centre[1]) / 150) ** 2))[None, :, None]
            * np.exp(-(((x - centre[2]) / 150) ** 2))[None, None, :]).astype(np.float32)


def write_rtdose(path: Path, dose: np.ndarray, origin) -> None:
    """The dose as an RTDOSE file (uint32 pixels, DoseGridScaling 1e-5 Gy)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, RTDoseStorage, generate_uid

    dataset = Dataset()
    dataset.file_meta = FileMetaDataset()
    dataset.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset.file_meta.MediaStorageSOPClassUID = RTDoseStorage
    dataset.SOPClassUID, dataset.SOPInstanceUID, dataset.Modality = RTDoseStorage, generate_uid(), "RTDOSE"
    dataset.FrameOfReferenceUID = generate_uid()
    dataset.ImagePositionPatient, dataset.ImageOrientationPatient = list(origin), [1, 0, 0, 0, 1, 0]
    dataset.PixelSpacing = [SPACING[1], SPACING[2]]
    dataset.NumberOfFrames, dataset.Rows, dataset.Columns = dose.shape
    dataset.GridFrameOffsetVector = list(np.arange(dose.shape[0]) * SPACING[0])
    dataset.SamplesPerPixel, dataset.PhotometricInterpretation = 1, "MONOCHROME2"
    dataset.BitsAllocated, dataset.BitsStored, dataset.HighBit, dataset.PixelRepresentation = 32, 32, 31, 0
    dataset.DoseUnits, dataset.DoseType, dataset.DoseSummationType, dataset.DoseGridScaling = "GY", "PHYSICAL", "PLAN", "1e-5"
    dataset.PixelData = np.round(dose / 1e-5).astype("<u4").tobytes()
    dataset.save_as(path, enforce_file_format=True)


def check(result, labels: np.ndarray, dose: DoseGrid) -> None:
    """Every structure's reference Dmean (Gy) and volume (cc) against scipy's trilinear
    interpolation of the dose at its voxel centres (the dose grid is the structures' grid shifted
    by half a voxel: dose index = structure index - 0.5)."""
    from scipy.ndimage import map_coordinates

    assert len(result.structures) == STRUCTURES
    voxel_cc = np.prod(SPACING) / 1000
    for structure in result.structures:
        indices = np.argwhere(labels == structure.reference_label) - 0.5
        assert indices.min() >= 0 and (indices <= np.array(SHAPE) - 1).all()  # inside the dose grid
        mean = map_coordinates(dose.dose, indices.T, order=1).mean(dtype=np.float64)
        assert abs(structure.value("dose_dmean_reference_gy") - mean) < 1e-4, structure.structure
        assert abs(structure.value("dose_volume_reference_cc") - len(indices) * voxel_cc) < 1e-9
    print(f"reference Dmean and volume of the {STRUCTURES} structures equal scipy's on their voxel centres")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    labels = structures(np.random.default_rng(0))
    reference = LabelImage(labels, SPACING)
    test = reference.with_array(np.roll(labels, (1, 1), axis=(1, 2)))
    origin = tuple(s / 2 for s in SPACING[::-1])  # half a voxel off the structures' grid (x, y, z)
    dose = DoseGrid(dose_field(), SPACING, origin, tuple(np.eye(3).ravel()))
    params = segmetrics.Parameters(dose_levels_gy=(20, 30))
    print(f"{STRUCTURES} structures, {np.count_nonzero(labels) / labels.size:.1%} of {SHAPE} voxels "
          f"(z, y, x) at {SPACING} mm; dose grid {dose.dose.shape} shifted by half a voxel")

    def run(given_dose):
        return segmetrics.compare(reference, test, metrics="dose", dose=given_dose, params=params)

    first, result = best_time(lambda: run(dose), 1)
    check(result, labels, dose)
    seconds, _ = best_time(lambda: run(dose), args.repeats)
    print(f"compare, dose in memory: first call {first:.2f} s, then {seconds:.2f} s for {STRUCTURES} structures "
          "(goal < 2 s)")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rtdose.dcm"
        write_rtdose(path, dose.dose, origin)
        seconds, _ = best_time(lambda: run(str(path)), args.repeats)
        print(f"compare, RTDOSE file read each time: {seconds:.2f} s")
    angle = np.radians(1.0)
    about_z = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    oblique = DoseGrid(dose.dose, SPACING, origin, tuple(about_z.ravel()))
    seconds, _ = best_time(lambda: run(oblique), args.repeats)
    print(f"compare, dose grid rotated 1 degree about z: {seconds:.2f} s")


if __name__ == "__main__":
    main()
