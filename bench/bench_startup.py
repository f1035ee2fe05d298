"""Start-up cost of a new process: ``import segmetrics``, ``segmetrics --help``, a tiny ``segmetrics compare``.

Each command runs ``--repeats`` times in a new interpreter under GNU ``time``; printed are the best
wall time, the CPU time (user + system) of that run and its peak resident memory, next to a bare
``python -c pass`` for the interpreter's own share. The tiny comparison is two 20³ masks of one
voxel each (``.nii.gz``), all metric groups: its cost is the import of the metric stack
(NumPy, SciPy, VTK, numba, scikit-image) plus loading the compiled kernels from numba's cache.

Usage: python bench/bench_startup.py [--repeats 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import write_image


def run(command) -> tuple:
    """``(wall s, CPU s, peak RSS MB)`` of one run of ``command`` in a new process, measured by GNU
    ``time`` (a small parent: a child forked from this benchmark would count its memory too)."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", *map(str, command)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=os.environ)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} failed: {done.stderr.strip()}")
    wall, user, system, rss_kb = map(float, done.stderr.strip().splitlines()[-1].split())
    return wall, user + system, rss_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, corner in (("reference", 5), ("test", 6)):
            mask = np.zeros((20, 20, 20), bool)
            mask[corner, corner, corner] = True
            files.append(write_image(mask, (1.0, 1.0, 1.0), Path(tmp) / f"{name}.nii.gz"))
        commands = {
            "python -c pass (interpreter alone)": [python, "-c", "pass"],
            "import segmetrics": [python, "-c", "import segmetrics"],
            "segmetrics --help": [python, "-m", "segmetrics.cli", "--help"],
            "segmetrics compare --help": [python, "-m", "segmetrics.cli", "compare", "--help"],
            "segmetrics compare, two 20^3 one-voxel masks": [python, "-m", "segmetrics.cli", "compare", *map(str, files)],
        }
        print(f"{'command':<46} {'wall s':>7} {'CPU s':>6} {'peak RSS MB':>12}   (best of {args.repeats})")
        for name, command in commands.items():
            wall, cpu, rss = min(run(command) for _ in range(args.repeats))
            print(f"{name:<46} {wall:>7.2f} {cpu:>6.2f} {rss:>12.0f}")


if __name__ == "__main__":
    main()
