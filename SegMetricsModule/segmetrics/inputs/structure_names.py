"""How structures of two sets are matched by name: the one place for the name rules.

1. exact name;
2. the same name ignoring case and separators: :func:`normalise_name` (``Lung_L`` = ``lung l`` =
   ``LUNG-L``);
3. synonyms: a JSON object ``{"canonical name": ["synonym", ...]}`` (e.g. TG-263 names and the
   local ones, ``{"Lung_L": ["Lt Lung", "Left lung"]}``), compared after normalising too.

Names that match nothing stay as they are (and are reported unmatched by ``compare``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .validation import ReadError

_SEPARATORS = re.compile(r"[\W_]+")


def normalise_name(name) -> str:
    """Lower case (Unicode case folding), every run of non-alphanumeric characters one space."""
    return _SEPARATORS.sub(" ", str(name).casefold()).strip()


def read_synonyms(path) -> dict:
    """``{normalised synonym: canonical name}`` from a JSON file ``{"Lung_L": ["Lt Lung", ...]}``."""
    path = Path(path)
    expected = f'{path}: expected a JSON object of names and their synonyms like {{"Lung_L": ["Lt Lung"]}}'
    try:
        groups = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise ReadError(f"{path}: no such file") from error
    except ValueError as error:
        raise ReadError(f"{expected} ({error})") from error
    if not isinstance(groups, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v)
                                               for v in groups.values()):
        raise ReadError(expected)
    return {normalise_name(synonym): canonical for canonical, synonyms in groups.items()
            for synonym in [canonical, *synonyms]}


def match_key(name, synonyms: dict | None = None) -> str:
    """The key two names must share to be one structure (after rules 2 and 3)."""
    key = normalise_name(name)
    return normalise_name((synonyms or {}).get(key, key))


def match_names(reference_names, test_names, synonyms: dict | None = None) -> dict:
    """``{test name: reference name}`` for test names without an exact partner whose
    :func:`match_key` equals that of exactly one unpaired reference name."""
    unpaired_reference = [n for n in reference_names if n not in test_names]
    unpaired_test = [n for n in test_names if n not in reference_names]
    matched = {}
    for name in unpaired_test:
        candidates = [r for r in unpaired_reference if match_key(r, synonyms) == match_key(name, synonyms)]
        if len(candidates) == 1 and candidates[0] not in matched.values():
            matched[name] = candidates[0]
    return matched
