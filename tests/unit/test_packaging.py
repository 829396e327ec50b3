"""What the wheel promises its users: every package it ships carries its types (PEP 561)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_package_is_marked_typed_and_tracked() -> None:
    """Hatch puts every tracked file of a package in the wheel: a ``py.typed`` there tells mypy and
    pyright to read the package's annotations instead of treating it as untyped."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "packages"
    ]
    markers = [f"{package}/py.typed" for package in packages]
    tracked = subprocess.run(
        ["git", "ls-files", *markers], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(tracked) == sorted(markers)
