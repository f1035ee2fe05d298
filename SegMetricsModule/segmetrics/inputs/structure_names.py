"""How structures of two sets are matched by name: the one place for the name rules.

A test structure without a reference structure of exactly its name is paired by the first of
these rules that gives it a partner among the reference structures still unpaired (each rule's
key is compared; the rule is reported with every match):

1. ``synonyms``: the user's synonyms (``--synonyms``, :func:`read_synonyms`: a JSON object
   ``{"canonical name": ["synonym", ...]}``), each name replaced by its canonical one; the user's
   word comes before every built-in rule;
2. ``case and separators``: the same words ignoring case, separators and word breaks
   (:func:`words`: ``Lung_L`` = ``lung l`` = ``LUNG-L``, ``SpinalCord`` = ``Spinal Cord``);
3. ``laterality``: the same words once a side word at either end is read as the side (``L``,
   ``Lt``, ``Left``, ``R``, ``Rt``, ``Right``: ``Lt Lung`` = ``Lung_L`` = ``Left Lung`` = ``L_Lung``);
4. ``TG-263``: each name replaced by its AAPM TG-263 standard name, through the table of TG-263
   names and their descriptions (``tg263_names.csv``, derived from the TG-263 list: ``Brain Stem``
   = ``Brainstem``, ``Urinary Bladder`` = ``Bladder``, ``Left Mastoid Bone`` = ``Bone_Mastoid_L``)
   and :data:`ABBREVIATIONS` (``SC``, ``Cord`` → ``SpinalCord``, ``Esoph`` → ``Esophagus``,
   ``Lt Femoral Head`` → ``Femur_Head_L``).

No built-in rule pairs two TG-263 names (``VB_S`` and ``VBs`` are two structures), and no rule
pairs two names of different sides (:func:`side`, after the user's synonyms): ``Lung_L`` never
pairs with ``Lung_R`` nor with ``Lungs``. No rule drops a word or a number, so targets of
different dose levels (``PTV_7000``, ``PTV_5600``) never pair.

A match is never made when it is ambiguous: a test name whose key equals that of several
unpaired reference names, or several test names sharing the key of one reference name, stay
unpaired and are listed (:class:`Ambiguity`). Names that match nothing stay as they are (and are
reported unmatched by ``compare``).
"""
from __future__ import annotations

import csv
import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .validation import ReadError

_SEPARATORS = re.compile(r"[\W_]+")
_WORD_BREAK = re.compile(r"(?<=[a-z])(?=[A-Z])")
_SIDES = {"l": "left", "lt": "left", "left": "left", "r": "right", "rt": "right", "right": "right"}
#: Common abbreviations of structure names and the TG-263 name each stands for.
#: A sided abbreviation is written with its side (read at either end of a name, like any side word).
ABBREVIATIONS = {"SC": "SpinalCord", "Cord": "SpinalCord", "Esoph": "Esophagus", "Oesophagus": "Esophagus",
                 "Chiasm": "OpticChiasm", "Femoral Head L": "Femur_Head_L", "Femoral Head R": "Femur_Head_R",
                 "Parotid Gland L": "Parotid_L", "Parotid Gland R": "Parotid_R"}
TG263_TABLE = Path(__file__).with_name("tg263_names.csv")


@dataclass(frozen=True)
class NameMatch:
    """A test structure paired with a reference structure of another name, and the rule that did it."""

    test: str
    reference: str
    rule: str


@dataclass(frozen=True)
class Ambiguity:
    """Names one rule would pair in more than one way: all are left unpaired."""

    tests: tuple
    references: tuple
    rule: str


def normalise_name(name) -> str:
    """Lower case (Unicode case folding), every run of non-alphanumeric characters one space."""
    return _SEPARATORS.sub(" ", str(name).casefold()).strip()


def words(name) -> list:
    """The words of a name, lower case: split at separators and where a lower-case letter meets
    an upper-case one (``SpinalCord_L`` → ``spinal``, ``cord``, ``l``)."""
    return [w.casefold() for part in _SEPARATORS.split(str(name)) for w in _WORD_BREAK.split(part) if w]


def _joined(name) -> str:
    return "".join(words(name))


def _lateral(name) -> str:
    """``side:rest``: a side word at either end of a name (not its only word) read as the side."""
    parts = words(name)
    ends = [_SIDES.get(parts[0]), _SIDES.get(parts[-1])] if len(parts) > 1 else [None, None]
    if ends[0] and not ends[1]:
        return f"{ends[0]}:{''.join(parts[1:])}"
    if ends[1] and not ends[0]:
        return f"{ends[1]}:{''.join(parts[:-1])}"
    return f":{''.join(parts)}"


def side(name) -> str:
    """``left``, ``right`` or ``""``: the side word at either end of a name (:func:`_lateral`)."""
    return _lateral(name).split(":", 1)[0]


@lru_cache(maxsize=1)
def _tg263_rows() -> list:
    """The rows (``name``, ``description``) of ``tg263_names.csv``."""
    with TG263_TABLE.open(newline="") as table:
        return list(csv.DictReader(line for line in table if not line.startswith("#")))


def tg263_standard_names() -> set:
    """The TG-263 names themselves, as the list spells them."""
    return {row["name"] for row in _tg263_rows()}


@lru_cache(maxsize=1)
def tg263_names() -> dict:
    """``{laterality key of a description or abbreviation: TG-263 name}`` from ``tg263_names.csv``
    and :data:`ABBREVIATIONS`. A description is keyed with its name's side (the list has
    descriptions that name the other side, ``Femur_Neck_L,Femur Neck Right``: the name is the
    standard); a description shared by several names (``Carotid Artery`` for ``A_Carotid_L`` and
    ``A_Carotid_R``, keyed with each name's side) is left out of the table."""
    names = {}
    for row in _tg263_rows():
        description = _lateral(row["description"])
        key = f"{side(row['name']) or side(row['description'])}:{description.split(':', 1)[1]}"
        names.setdefault(key, set()).add(row["name"])
    table = {key: next(iter(found)) for key, found in names.items() if len(found) == 1}
    table.update({_lateral(short): name for short, name in ABBREVIATIONS.items()})
    return table


def _tg263(name) -> str:
    """The laterality key of a name's TG-263 name (:func:`tg263_names`, looked up with the name's
    side, else without it), always with the name's own side; else the name's key."""
    key = _lateral(name)
    name_side, rest = key.split(":", 1)
    found = tg263_names().get(key) or tg263_names().get(f":{rest}")
    return f"{name_side}:{_lateral(found).split(':', 1)[1]}" if found else key


#: What a synonyms file (or the dict of its content) holds.
_SYNONYMS_SHAPE = 'expected a JSON object of names and their synonyms like {"Lung_L": ["Lt Lung"]}'


def read_synonyms(path) -> dict:
    """``{normalised synonym: canonical name}`` from a JSON file ``{"Lung_L": ["Lt Lung", ...]}``."""
    path = Path(path)
    try:
        groups = json.loads(path.read_text())
    except FileNotFoundError as error:
        raise ReadError(f"{path}: no such file") from error
    except ValueError as error:
        raise ReadError(f"{path}: {_SYNONYMS_SHAPE} ({error})") from error
    return _from_groups(groups, str(path))


def _from_groups(groups, source: str) -> dict:
    if not isinstance(groups, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v)
                                               for v in groups.values()):
        raise ReadError(f"{source}: {_SYNONYMS_SHAPE}")
    return {normalise_name(synonym): canonical for canonical, synonyms in groups.items()
            for synonym in [canonical, *synonyms]}


def synonym_map(synonyms) -> dict | None:
    """``{normalised synonym: canonical name}`` from what a user gives: the path of a synonyms file,
    the dict of its content (``{"Lung_L": ["Lt Lung"]}``), or such a map already (:func:`read_synonyms`);
    None for None. :class:`ReadError` (one line) for anything else."""
    if synonyms is None or (isinstance(synonyms, dict) and not synonyms):
        return None
    if not isinstance(synonyms, dict):
        return read_synonyms(synonyms)
    if all(isinstance(name, str) for name in synonyms.values()):
        return {normalise_name(synonym): canonical for synonym, canonical in synonyms.items()}
    return _from_groups(synonyms, "synonyms")


def match_key(name, synonyms: dict | None = None) -> str:
    """The key two names share when the user's synonyms make them one structure (rule 3)."""
    return _lateral((synonyms or {}).get(normalise_name(name), name))


def _synonym_key(name, synonyms):
    """The key of a name's canonical name when the user's synonyms list the name, else None."""
    canonical = synonyms.get(normalise_name(name))
    return _lateral(canonical) if canonical is not None else None


def _rules(synonyms):
    """``(rule, key function)`` in the order they are tried; a key None pairs with nothing."""
    rules = [("synonyms", lambda name: _synonym_key(name, synonyms))] if synonyms else []
    rules += [("case and separators", _joined), ("laterality", _lateral)]
    rules.append(("TG-263", lambda name: _tg263(match_key(name, synonyms))))
    return rules


def match_structures(reference_names, test_names, synonyms: dict | None = None) -> tuple:
    """``(matches, ambiguities)``: the :class:`NameMatch` of each test name without an exact
    partner paired by the first rule that gives it exactly one unpaired reference name (and no
    other test name that reference name), and the :class:`Ambiguity` of the names left unpaired
    because a rule would pair them in more than one way."""
    references = [n for n in reference_names if n not in test_names]
    tests = [n for n in test_names if n not in reference_names]
    sides = {name: side(match_key(name, synonyms)) for name in [*references, *tests]}
    standard = tg263_standard_names()
    matches, ambiguities = [], []
    for rule, key in _rules(synonyms):
        keys = {name: key(name) for name in references}
        proposals = {name: [r for r in references if keys[r] is not None and keys[r] == key(name)
                            and sides[r] == sides[name] and (rule == "synonyms" or not {r, name} <= standard)]
                     for name in tests}
        claims = Counter(found[0] for found in proposals.values() if len(found) == 1)
        for name, found in proposals.items():
            if len(found) > 1:
                ambiguities.append(Ambiguity((name,), tuple(found), rule))
            elif found and claims[found[0]] == 1:
                matches.append(NameMatch(name, found[0], rule))
        for reference, count in claims.items():
            if count > 1:
                ambiguities.append(Ambiguity(tuple(n for n, f in proposals.items() if f == [reference]),
                                             (reference,), rule))
        settled = {m.test for m in matches} | {n for a in ambiguities for n in a.tests}
        tests = [n for n in tests if n not in settled]
        references = [n for n in references if n not in {m.reference for m in matches} and
                      n not in {r for a in ambiguities for r in a.references}]
    return matches, ambiguities

