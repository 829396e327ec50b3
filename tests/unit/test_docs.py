"""A clone holds every document the README, the docs and the code's messages point to."""

from __future__ import annotations

import re
import shlex
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
#: The delimiter row under a table's header: ``|---|:--:|``.
DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")
#: A ``strata …`` command in a line of a code block: the line's (up to a pipe or ``;``), or one ``$(…)`` runs.
SHOWN = re.compile(r"^\s*strata((?: [^|;\n]*)?)|\$\((?:\.venv/bin/)?strata([^)]*)\)")
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


def _pages() -> list[Path]:
    """The README and the reference pages under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _prose_lines(doc: Path) -> list[str]:
    """The page's lines, those of fenced code blocks blanked (a ``|`` there is code, not a table)."""
    lines, fenced = doc.read_text().splitlines(), False
    for n, line in enumerate(lines):
        fence = line.lstrip().startswith("```")
        fenced ^= fence
        if fenced or fence:
            lines[n] = ""
    return lines


def _cells(row: str) -> int:
    """How many cells a table row has: its unescaped ``|`` split it (inside code spans too, as GitHub does)."""
    body = row.strip().removeprefix("|")
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return len(re.split(r"(?<!\\)\|", body))


def test_every_table_of_the_readme_and_the_docs_parses() -> None:
    """A table is its header, the delimiter row, rows of as many cells, with a blank line before and
    after: a paragraph's line right after it would be read as one more row."""
    broken = []
    for doc in _pages():
        lines = _prose_lines(doc)
        n = 0
        while n < len(lines):
            if not lines[n].lstrip().startswith("|"):
                n += 1
                continue
            end = next((m for m in range(n, len(lines)) if not lines[m].lstrip().startswith("|")), len(lines))
            rows, where = lines[n:end], f"{doc.relative_to(REPO)}:{n + 1}"
            if len(rows) < 2 or not DELIMITER.fullmatch(rows[1].strip()):
                broken.append(f"{where}: no delimiter row under the header")
            elif len({_cells(row) for row in rows}) > 1:
                broken.append(f"{where}: rows of {[_cells(row) for row in rows]} cells")
            if n and lines[n - 1].strip():
                broken.append(f"{where}: no blank line before the table")
            if end < len(lines) and lines[end].strip():
                broken.append(f"{where}: the line after the table ({lines[end][:40]!r}) would be one more row")
            n = end
    assert not broken, broken


def _shown_commands() -> set[tuple[str, ...]]:
    """Every ``strata …`` command the README and the docs show, as its words: in a line of a code block
    (up to a shell pipe; ``$(.venv/bin/strata …)`` too), or as inline code (whose ``\\|`` separates
    alternatives)."""
    shown: set[tuple[str, ...]] = set()
    for doc in _pages():
        text = doc.read_text()
        for line in (line for block in FENCED.findall(text) for line in block.splitlines()):
            shown |= {tuple(shlex.split(alone or run, comments=True)) for alone, run in SHOWN.findall(line)}
        for span in INLINE.findall(FENCED.sub("", text)):
            if re.match(r"`strata[ `]", span):
                shown.add(tuple(shlex.split(span.strip("`").removeprefix("strata").replace("\\|", " | "))))
    return shown


def test_every_strata_command_the_docs_show_exists_with_its_options() -> None:
    """Each command a page shows answers ``--help`` (run in this process), and each ``--option`` it
    shows is one of that command's (or the root's)."""
    import typer
    from typer.testing import CliRunner

    from strata.cli import app

    root = typer.main.get_command(app)
    shown = _shown_commands()
    assert len(shown) > 30, "the pattern of a shown command is stale"
    wrong, paths = [], set()
    for words in sorted(shown):
        command, path = root, []
        for word in words:
            group = getattr(command, "commands", None)  # a group's subcommands (typer's own click)
            if group is None or not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            if word not in group:
                wrong.append(f"strata {' '.join(words)}: no command {word!r} in `strata {' '.join(path)}`")
                break
            command, path = group[word], [*path, word]
        options = {o for p in [*command.params, *root.params] for o in [*p.opts, *p.secondary_opts]} | {"--help"}
        for option in {m for w in words for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", w)} - options:
            wrong.append(f"strata {' '.join(words)}: `strata {' '.join(path)}` has no option {option}")
        paths.add(tuple(path))
    for path in sorted(paths):
        result = CliRunner().invoke(app, [*path, "--help"])
        if result.exit_code != 0:
            wrong.append(f"strata {' '.join(path)} --help: exit {result.exit_code}: {result.output[-300:]}")
    assert not wrong, wrong


def test_the_rule_ids_documented_are_those_the_dwd_build_gives() -> None:
    """docs/pipeline.md's table of rule ids names each id the DWD transform gives itself and each kind of
    contract rule the DWD tables' row checks report (``<column>.<rule>``), and no other."""
    import datetime as dt

    import polars as pl

    from contracts.rules import checked
    from warehouse.dwd.transform import (
        MALFORMED_RULES,
        MODEL_REQUIRED,
        TS_EVENT_DATE,
        TS_FLOOR,
        UNPARSEABLE,
        with_raw_user_id,
    )
    from warehouse.tables import DWD_FEEDBACK, DWD_REQUEST

    now = dt.datetime.now(dt.UTC)
    kinds = {"type"}
    for contract in (with_raw_user_id(DWD_REQUEST.contract), DWD_FEEDBACK.contract):
        for column in contract.columns:
            kinds |= {
                r.name for r in checked(column, contract) if r.row_check(pl.col(column.name), column, now) is not None
            }
    given = {rule for _, rule in MALFORMED_RULES} | {UNPARSEABLE, TS_FLOOR, TS_EVENT_DATE, MODEL_REQUIRED}
    given |= {"primary_key.unique"}
    given |= {f"<column>.{kind}" for kind in kinds}
    lines = _prose_lines(REPO / "docs" / "pipeline.md")
    start = next(n for n, line in enumerate(lines) if line.startswith("| rule id |"))
    rows = lines[start + 2 : next(n for n in range(start, len(lines)) if not lines[n].startswith("|"))]
    documented = {rule for row in rows for rule in re.findall(r"`([^`]+)`", row.split("|")[1])}
    assert documented == given
