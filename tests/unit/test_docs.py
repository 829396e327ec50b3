"""A clone holds every document the README, the docs and the code's messages point to."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Markdown links to files of the repository (not URLs, not anchors of the same page).
LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)")
#: A section of the design named in code or prose: ``docs/design.md §n``.
SECTION = re.compile(r"docs/design\.md §(\d+)")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / line for line in out.stdout.splitlines()]


def test_markdown_links_resolve_inside_the_repository() -> None:
    missing = [
        f"{doc.relative_to(REPO)} → {target}"
        for doc in _tracked("*.md")
        for target in LINK.findall(doc.read_text())
        if not (doc.parent / target).resolve().is_relative_to(REPO) or not (doc.parent / target).exists()
    ]
    assert not missing, missing


def test_nothing_points_outside_the_clone() -> None:
    """``../shared`` is the steering folder of the team's machines, not part of a clone."""
    hits = [
        f"{path.relative_to(REPO)}:{n}"
        for path in _tracked("*.md", "*.py", "*.yaml", "*.yml", "*.toml")
        if path.parts[len(REPO.parts)] != "tests"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "../shared" in line or "DESIGN §" in line
    ]
    assert not hits, hits


def test_every_design_section_named_exists() -> None:
    design = (REPO / "docs" / "design.md").read_text()
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", design, re.MULTILINE)}
    named = {
        (path.relative_to(REPO), int(n)) for path in _tracked("*.md", "*.py") for n in SECTION.findall(path.read_text())
    }
    assert named, "nothing names a section of docs/design.md: the pattern is stale"
    assert all(n in sections for _, n in named), sorted(named)
