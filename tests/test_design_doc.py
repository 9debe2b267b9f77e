"""docs/design.md is the project's own design doc, and everything that cites it can be followed:
no file points at a design file outside the repository, every test the invariants section
names exists, every "invariant N" cited anywhere is one the doc defines, and every section a
citation names by title is a heading of the doc.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN_PATH = "docs/design.md"
DESIGN = REPO / DESIGN_PATH
# The bare file name, written in two parts so that this file does not name it itself.
_NAME = "design" + ".md"

# Any spelling of the design file's name; each must be the repository's own path.
_DESIGN_NAME = re.compile(r"design\.md", re.IGNORECASE)
# A Markdown link from another page of docs/ may name it relatively.
_RELATIVE_LINK = "](" + _NAME
# "invariant 3", "invariants 3 and 4", "invariants 1, 2, 5 and 6", "invariants 1-5".
_CITATION = re.compile(
    r"\binvariants?\s+(\d+(?:\s*(?:,|-|\u2013|and|or|to)\s*\d+)*)", re.IGNORECASE)
_RANGE = re.compile(r"(\d+)\s*(?:-|\u2013|to)\s*(\d+)")
_NUMBER = re.compile(r"\d+")
# A test named as `tests/test_x.py::test_name`.
_TEST_REF = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
# docs/design.md, a comma, and a section title in double quotes (the comma and a `section`
# before the title optional).
_SECTION_CITATION = re.compile(r'docs/design\.md,?\s+(?:section\s+)?"([^"]+)"')
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
_NUMBERED = re.compile(r"^\d+(?:\.\d+)*\.?\s+")
# Third-party code shipped with the status page: not ours to cite anything.
_VENDORED = "pipeline/service/static/vendor/"


@cache
def repository_files() -> tuple[str, ...]:
    """Every file of the repository, relative to its root: git's tracked files, or in a copy
    without git (an unpacked source archive) every file outside hidden and build folders."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"
                       and not d.endswith(".egg-info") and d not in ("build", "dist")]
            found += [os.path.relpath(os.path.join(root, f), REPO) for f in files]
        return tuple(sorted(p.replace(os.sep, "/") for p in found))
    return tuple(name.decode() for name in listed.split(b"\0") if name)


@cache
def texts() -> dict[str, str]:
    """Each text file of the repository by path (binary files left out)."""
    found = {}
    for name in repository_files():
        path = REPO / name
        if not path.is_file():
            continue  # deleted in the working tree, not yet in git
        data = path.read_bytes()
        if b"\0" not in data:
            found[name] = data.decode("utf-8", "replace")
    return found


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def invariants_section(text: str) -> str:
    """The text of the section headed `## ... Invariants`, up to the next `## ` heading."""
    match = re.search(r"^## (?:\d+\.\s+)?Invariants\s*$(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    assert match, f"{DESIGN_PATH} has no '## Invariants' section"
    return match.group(1)


def invariants_defined(text: str) -> dict[int, str]:
    """Each invariant the doc defines, by number: the text of its `### N. Name` subsection."""
    section = invariants_section(text)
    parts = re.split(r"^### (\d+)\.\s+.*$", section, flags=re.MULTILINE)
    return {int(number): body for number, body in zip(parts[1::2], parts[2::2], strict=True)}


def cited_invariants(text: str) -> set[int]:
    """The numbers of every invariant a text cites."""
    numbers: set[int] = set()
    for match in _CITATION.finditer(text):
        cited = match.group(1)
        for low, high in _RANGE.findall(cited):
            numbers.update(range(int(low), int(high) + 1))
        numbers.update(int(n) for n in _NUMBER.findall(_RANGE.sub("", cited)))
    return numbers


def misnamed_design(name: str, text: str) -> list[str]:
    """Each place where `text` (the file `name`) names a design file other than as the
    repository's docs/design.md, as `name:line: the line`."""
    wrong = []
    for match in _DESIGN_NAME.finditer(text):
        start = match.start()
        if text[max(0, start - 5):match.end()] == DESIGN_PATH:
            continue
        if name.startswith("docs/") and text[max(0, start - 2):match.end()] == _RELATIVE_LINK:
            continue
        line = text.count("\n", 0, start) + 1
        wrong.append(f"{name}:{line}: {text.splitlines()[line - 1].strip()}")
    return wrong


def defined_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def missing_tests(section: str) -> list[str]:
    """Each `tests/x.py::test_y` of `section` whose file or function does not exist."""
    missing = []
    for file, test in _TEST_REF.findall(section):
        path = REPO / file
        if not path.is_file():
            missing.append(f"{file}::{test} (no such file)")
        elif test not in defined_functions(path):
            missing.append(f"{file}::{test} (no such test in the file)")
    return missing


def headings(text: str) -> set[str]:
    return {_NUMBERED.sub("", heading) for heading in _HEADING.findall(text)}


def test_no_file_names_a_design_file_outside_the_repository():
    assert DESIGN.is_file(), f"{DESIGN_PATH} is missing"
    wrong = [place for name, text in texts().items() for place in misnamed_design(name, text)]
    assert wrong == [], "cite docs/design.md instead:\n" + "\n".join(wrong)


def test_the_check_for_design_file_names_tells_the_repositorys_own_from_others():
    assert misnamed_design("pipeline/x.py", "see docs/design.md, invariant 3") == []
    assert misnamed_design("docs/x.md", f"see [the design]({_NAME})") == []
    assert misnamed_design("pipeline/x.py", f"see ../shared/{_NAME.upper()}") != []
    assert misnamed_design("pipeline/x.py", f"# {_NAME.capitalize()} default") != []
    assert misnamed_design("README.md", f"[the design]({_NAME})") != []


def test_the_doc_defines_invariants_one_to_seven_each_with_tests_and_what_is_not_proven():
    defined = invariants_defined(design_text())
    assert sorted(defined) == list(range(1, 8))
    for number, body in defined.items():
        assert _TEST_REF.search(body), f"invariant {number} names no test that proves it"
        assert "**Not proven" in body, f"invariant {number} does not say what is not proven"


def test_every_test_the_invariants_section_names_exists():
    section = invariants_section(design_text())
    assert len(_TEST_REF.findall(section)) >= 7
    missing = missing_tests(section)
    assert missing == [], f"{DESIGN_PATH} names tests that do not exist:\n" + "\n".join(missing)


def test_the_check_for_named_tests_finds_a_missing_file_or_function():
    assert missing_tests("`tests/test_design_doc.py::test_every_test_the_invariants_section_"
                         "names_exists`") == []
    assert missing_tests("`tests/test_design_doc.py::test_that_is_not_there`") != []
    assert missing_tests("`tests/test_no_such_module.py::test_x`") != []


def test_every_invariant_cited_in_code_or_docs_is_one_the_doc_defines():
    defined = set(invariants_defined(design_text()))
    undefined = [
        f"{name}: invariant {number}"
        for name, text in texts().items() if not name.startswith(_VENDORED)
        for number in sorted(cited_invariants(text) - defined)
    ]
    assert undefined == [], f"cited but not defined in {DESIGN_PATH}:\n" + "\n".join(undefined)


def test_citations_of_invariants_are_read_in_every_form_they_take():
    assert cited_invariants("keeps invariant 3") == {3}
    assert cited_invariants("(invariants 3 and 4)") == {3, 4}
    assert cited_invariants("invariants 1, 2, 5 and 6") == {1, 2, 5, 6}
    assert cited_invariants("Invariants 1-5") == {1, 2, 3, 4, 5}
    assert cited_invariants("invariant " + "8 of another list") == {8}
    assert cited_invariants("check_invariants(min_delay=1)") == set()


def test_every_section_cited_by_title_is_a_heading_of_the_doc():
    titles = headings(design_text())
    unknown = [
        f"{name}: {cited!r}"
        for name, text in texts().items()
        for cited in (" ".join(t.split()) for t in _SECTION_CITATION.findall(text))
        if cited not in titles
    ]
    assert unknown == [], f"no such section in {DESIGN_PATH}:\n" + "\n".join(unknown)
