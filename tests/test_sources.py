"""Every cited source is in docs/sources.md, every entry there is used, and nothing points outside the repo.

Citations take two forms: an inline key ``[src: key]`` (several keys separated by commas) and the
short forms an entry lists under "Cited as". The checks are textual, over the tracked files (``git
ls-files``; a walk of the tree skipping .git, .venv and caches when git is unavailable).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = "docs/sources.md"
THIS = "tests/test_sources.py"
TEXT_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".ipynb", ".json", ".toml", ".txt", ".cfg", ".ini", ".sh")

# Notes kept outside the repository, which a clone does not have. Built from pieces so that this file
# does not match its own patterns.
OUTSIDE = ("network" + ".md", "torch-cpu" + ".md", "shared" + "/reference")
MODELS_MD = re.compile(r"(?<![\w-])([\w./-]*?)models\.md")

TAG = re.compile(r"\[src:([^\]]*)\]")
KEY = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
HEADING = re.compile(r"^### `([^`]+)`\s*$", re.M)
ET_AL = re.compile(r"([A-Z][A-Za-zäöüéćš]+(?:-[A-Z][A-Za-zäöüéćš]+)?)(?: & [A-Z][a-z]+)? et al\b")
ISSUES = re.compile(r"\b(nccl-tests|nccl)(?: issues?)? #?(\d{2,4}(?:(?:\s*(?:,|/|and)\s*)\d{2,4})*)(?![\d.])")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = out.split()
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in {".git", ".venv", "__pycache__", ".pytest_cache"}]
            names += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
    return sorted(n for n in names if n.endswith(TEXT_SUFFIXES) and not n.startswith("tests/data/"))


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {n: read(n) for n in tracked_files() if (ROOT / n).is_file()}


@pytest.fixture(scope="module")
def entries() -> dict[str, str]:
    """docs/sources.md: key -> the entry's text (up to the next heading)."""
    doc = read(SOURCES)
    heads = list(HEADING.finditer(doc))
    out = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(doc)
        assert m.group(1) not in out, f"duplicate key {m.group(1)!r} in {SOURCES}"
        out[m.group(1)] = doc[m.end():end]
    return out


def cited_as(entry: str) -> list[str]:
    line = next((ln for ln in entry.splitlines() if ln.startswith("- Cited as:")), "")
    return re.findall(r"`([^`]+)`", line)


def tags(text: str) -> list[str]:
    return [k.strip() for m in TAG.finditer(text) for k in m.group(1).split(",")]


def stray_references(name: str, text: str) -> list[str]:
    """References in one file to notes outside the repository."""
    found = [p for p in OUTSIDE if p in text]
    for m in MODELS_MD.finditer(text):
        target = m.group(1) + "models.md"
        if not ((ROOT / target).is_file() or (ROOT / name).parent.joinpath(target).is_file()):
            found.append(target)
    return found


def test_no_reference_to_notes_outside_the_repository(texts):
    bad = {n: stray_references(n, t) for n, t in texts.items() if n != THIS}  # this file names the patterns
    bad = {n: refs for n, refs in bad.items() if refs}
    assert not bad, f"cite the primary source instead (see {SOURCES}): {bad}"


def test_stray_reference_detector_fires():
    # The check above must be able to fail: a new reference of each kind is caught, a real link is not.
    for ref in OUTSIDE:
        assert stray_references("simulator/x.py", f"# see {ref}")
    assert stray_references("simulator/x.py", "# see /work/" + "shared/reference/models.md")
    assert stray_references("simulator/x.py", "# see models.md")
    assert not stray_references("README.md", "see [docs/models.md](docs/models.md)")
    assert not stray_references("docs/cli.md", "see [models.md](models.md)")


def test_entries_are_well_formed(entries):
    assert len(entries) > 50
    for key, body in entries.items():
        assert KEY.match(key), f"{SOURCES}: key {key!r} must be lower-case letters, digits, '.' and '-'"
        assert "- Supports:" in body, f"{SOURCES}: {key} says what it supports"
        for path in re.findall(r"`([^`]+)`", next((ln for ln in body.splitlines() if ln.startswith("- Used in:")), "")):
            assert (ROOT / path).is_file(), f"{SOURCES}: {key} lists {path}, which does not exist"


def test_every_inline_key_has_an_entry(texts, entries):
    missing = {}
    for name, text in texts.items():
        if name in (SOURCES, THIS):
            continue
        for key in tags(text):
            assert KEY.match(key), f"{name}: malformed key {key!r} (keys comma-separated, one [src: ...] per line)"
            if key not in entries:
                missing.setdefault(name, []).append(key)
    assert not missing, f"keys without an entry in {SOURCES}: {missing}"


def test_every_entry_is_used(texts, entries):
    others = {n: t for n, t in texts.items() if n not in (SOURCES, THIS)}
    used = {k for t in others.values() for k in tags(t)}
    unused = []
    for key, body in entries.items():
        if key in used or "- Background:" in body:
            continue
        if not any(form in t for form in cited_as(body) for t in others.values()):
            unused.append(key)
    assert not unused, f"{SOURCES} entries nobody cites (cite them, or mark '- Background:'): {unused}"


def test_every_author_cited_has_an_entry(texts):
    doc = read(SOURCES)
    missing = {}
    for name, text in texts.items():
        if name in (SOURCES, THIS):
            continue
        for author in ET_AL.findall(text):
            if author not in doc:
                missing.setdefault(author, name)
    assert not missing, f"'Author et al.' citations without an entry in {SOURCES}: {missing}"


def test_every_nccl_issue_cited_has_an_entry(texts, entries):
    missing = {}
    for name, text in texts.items():
        if name in (SOURCES, THIS):
            continue
        for repo, numbers in ISSUES.findall(text):
            for n in re.findall(r"\d+", numbers):
                if f"{repo}-{n}" not in entries:
                    missing.setdefault(f"{repo}-{n}", name)
    assert not missing, f"issues cited without an entry in {SOURCES}: {missing}"


def test_citation_checks_can_fail(entries):
    # A tag with an unknown key, an unknown author and an unknown issue number are all detected.
    assert "no-such-source-1999" not in entries
    assert tags("x [src: nccl-tuning, no-such-source-1999]") == ["nccl-tuning", "no-such-source-1999"]
    assert ET_AL.findall("as Nobody et al. 2031 showed") == ["Nobody"] and "Nobody" not in read(SOURCES)
    assert ISSUES.findall("(nccl-tests issues 175, 100; nccl 9999)") == [("nccl-tests", "175, 100"), ("nccl", "9999")]
    assert "nccl-9999" not in entries
    assert ISSUES.findall("NCCL 2.30.7 and nccl 2.4") == []
