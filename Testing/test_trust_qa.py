"""More cases of issue 11's kinds, tried through the public paths (QA round): each test failed
before its fix."""
import json
import re

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

from segmetrics import Parameters, compare
from segmetrics.batch import Case, run_batch
from segmetrics.geometry import LabelImage
from segmetrics.io import ReadError, load_label_image
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
