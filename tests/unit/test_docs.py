"""A clone holds every document the README, the docs and the code's messages point to."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: A section of the design named in code or prose: ``docs/design.md §n``.
SECTION = re.compile(r"docs/design\.md §(\d+)")
#: Every Markdown link's target, the anchor included: ``[text](path#anchor)``.
TARGET = re.compile(r"\]\(([^)\s]+)\)")
#: What Markdown reads as code, not as links or headings: fenced blocks, inline code.
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`[^`\n]*`")
#: A heading's text, which GitHub turns into the anchor ``#…`` other pages link to.
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)
#: A requirement pinned to one version: ``name==version``.
PIN = re.compile(r"([A-Za-z0-9_.\-]+)==([^\s=<>!~;,]+)")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / line for line in out.stdout.splitlines()]


def _anchors(doc: Path) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, ``-n`` on repeats."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCED.sub("", doc.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        ids.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return ids


def test_markdown_links_and_anchors_resolve_inside_the_repository() -> None:
    """The README is the way in and docs/ the reference: every link between pages, down to the heading, lands."""
    broken = []
    for doc in _tracked("*.md"):
        for target in TARGET.findall(INLINE.sub("", FENCED.sub("", doc.read_text()))):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.is_relative_to(REPO) or not file.exists():
                broken.append(f"{doc.relative_to(REPO)} → {target}: no such file")
            elif anchor and (file.suffix != ".md" or anchor not in _anchors(file)):
                broken.append(f"{doc.relative_to(REPO)} → {target}: no such heading")
    assert not broken, broken


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


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pinned(requirements: list[str]) -> dict[str, str]:
    """``name==version`` requirements as name → version; a requirement not pinned so fails."""
    pins = {}
    for requirement in requirements:
        match = PIN.fullmatch(requirement)
        assert match, f"not pinned to one version: {requirement}"
        pins[_canonical(match[1])] = match[2]
    return pins


def test_the_client_install_line_pins_the_genai_client_group_as_locked() -> None:
    """docs/sources.md's install line for a service sending to ``strata collect`` installs exactly the
    ``genai-client`` group, the set the real-client test runs with, at the versions uv.lock holds."""
    sources = (REPO / "docs" / "sources.md").read_text()
    block = next(b for b in FENCED.findall(sources) if "pip install" in b and "openai" in b)
    command = block.replace("\\\n", " ").split("pip install", 1)[1].splitlines()[0]
    documented = _pinned(command.split())
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    group = _pinned(pyproject["dependency-groups"]["genai-client"])
    assert documented == group
    assert {"include-group": "genai-client"} in pyproject["dependency-groups"]["dev"], "make setup installs dev"
    locked = {p["name"]: p["version"] for p in tomllib.loads((REPO / "uv.lock").read_text())["package"]}
    assert {name: locked.get(name) for name in group} == group
