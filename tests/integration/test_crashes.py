"""A crash at any commit boundary of ingest, build or forget: the re-run equals the clean run.

Each command runs once as a real process that stops (SIGSTOP) at every commit boundary;
at each stop the test copies STRATA_HOME — exactly what a SIGKILL there would leave,
since a stopped process writes nothing more — and lets it go on. Every copy is then run
again with the same command and compared with a clean run; one run is really killed, too.
Nothing may be written outside STRATA_HOME meanwhile.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lake_compare import assert_no_trace, contents, differences

from strata import pipeline
from synthetic_workload import generate
from tests.conftest import REPO
from warehouse.settings import Settings, load_settings

DAY = dt.date(2026, 3, 2)
KEY = "test-key-not-a-secret-0123456789"


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    args: list[str]
    rerun: Callable[[Settings], object]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A small day of logs, and the homes before each command: empty, ingested, built."""
    root = tmp_path_factory.mktemp("crashes")
    data = root / "data"
    generate(data, days=1, requests_per_day=60, seed=3, start=DAY, fault_rate=0.05)
    landing = [data / "requests" / f"date={DAY}", data / "feedback" / f"date={DAY}"]
    first = next((data / "requests" / f"date={DAY}").rglob("*.jsonl.gz"))
    victim = next(
        json.loads(line)["user_id"]
        for line in gzip.decompress(first.read_bytes()).splitlines()
        if line.startswith(b"{") and b'"user_id"' in line and line.endswith(b"}")
    )
    homes = {"empty": root / "empty", "ingested": root / "ingested", "built": root / "built"}
    homes["empty"].mkdir()
    settings = _settings(homes["ingested"])
    pipeline.land(settings, landing)
    pipeline.load_prices(settings, data / "prices.csv")
    shutil.copytree(homes["ingested"], homes["built"])
    pipeline.build_dwd(_settings(homes["built"]), DAY)
    commands = {
        "ingest": Command("ingest", ["ingest", *map(str, landing)], lambda s: pipeline.land(s, landing)),
        "build": Command("build", ["build", "dwd", "--date", DAY.isoformat()], lambda s: pipeline.build_dwd(s, DAY)),
        "forget": Command("forget", ["forget", "--user", victim], lambda s: pipeline.forget(s, victim)),
    }
    return {"root": root, "homes": homes, "commands": commands, "victim": victim}


def _settings(home: Path) -> Settings:
    return load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY})


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _kept(outside: Path) -> list[Path]:
    """The folders under /tmp the isolated process still needs where they were: the test's own, and
    the checkout with its virtualenv when it lives under /tmp (a CI clone may)."""
    needed = [outside, REPO, Path(sys.prefix)]
    return sorted({Path("/tmp", p.relative_to("/tmp").parts[0]) for p in needed if p.is_relative_to("/tmp")})


def _isolated(args: list[str], outside: Path) -> list[str]:
    """``args`` run with /tmp and /dev/shm of their own (empty folders under ``outside``, bind-mounted
    in a private mount namespace), so what the process writes there is seen — and nothing another
    process on the machine writes is mistaken for it. The test's own folder and the checkout stay reachable."""
    tmp, shm = outside / "tmp", outside / "dev-shm"
    tmp.mkdir(parents=True)
    shm.mkdir(parents=True)
    script = f'mount --bind "{shm}" /dev/shm && '
    for top in _kept(outside):  # keep them where they were
        (tmp / top.name).mkdir()
        script += f'mount --bind "{top}" "{tmp / top.name}" && '
    script += f'mount --rbind "{tmp}" /tmp && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "strata", *args]


def _written_outside(outside: Path) -> list[str]:
    """What the isolated processes left in their /tmp, /dev/shm and home."""
    kept = {("tmp", top.name) for top in _kept(outside)}
    found = [p for p in outside.rglob("*") if p.relative_to(outside).parts[:2] not in kept]
    return sorted(
        str(p)
        for p in found
        if p.is_file() or (p.is_dir() and not any(p.iterdir()) and p.name not in ("tmp", "dev-shm", "home"))
    )


def _run_stopping(command: Command, home: Path, outside: Path, pause: str) -> list[Path]:
    """Run the command as a process that stops at boundaries; copy the home at each stop.
    With ``pause`` = ``every`` it goes on after each copy; with a number it is killed there."""
    env = {
        **os.environ,
        "HOME": str(outside / "home"),
        "STRATA_HOME": str(home),
        "STRATA_PSEUDONYM_KEY": KEY,
        "STRATA_PAUSE_AFTER": pause,
    }
    (outside / "home").mkdir(parents=True)
    proc = subprocess.Popen(
        _isolated([sys.executable, "-m", "strata.cli", *command.args], outside),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    copies: list[Path] = []
    while proc.poll() is None:
        if not _stopped(proc.pid):
            time.sleep(0.01)
            continue
        copy = home.parent / f"{home.name}-at-{len(copies) + 1}"
        shutil.copytree(home, copy)
        copies.append(copy)
        if pause == "every":
            os.kill(proc.pid, signal.SIGCONT)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGKILL), err
    return copies


@pytest.mark.parametrize("name", ["ingest", "build", "forget"])
def test_a_rerun_after_a_crash_at_any_commit_boundary_equals_a_clean_run(world: dict, name: str) -> None:
    command: Command = world["commands"][name]
    base = world["homes"][{"ingest": "empty", "build": "ingested", "forget": "built"}[name]]
    work = world["root"] / name
    clean = work / "clean"
    shutil.copytree(base, clean)
    command.rerun(_settings(clean))
    expected = contents(_settings(clean))

    stepped = work / "stepped"
    shutil.copytree(base, stepped)
    copies = _run_stopping(command, stepped, work / "outside-1", "every")
    assert len(copies) >= 3, f"{name} passed only {len(copies)} boundaries"
    killed = work / "killed"
    shutil.copytree(base, killed)
    copies += _run_stopping(command, killed, work / "outside-2", str(len(copies) // 2))  # really killed there
    for outside in (work / "outside-1", work / "outside-2"):
        assert _written_outside(outside) == [], "written outside STRATA_HOME"
    assert contents(_settings(stepped)) == expected  # the run that was only paused finished the job itself

    for copy in copies:
        command.rerun(_settings(copy))
        assert not differences(contents(_settings(copy)), expected), (
            copy.name,
            differences(contents(_settings(copy)), expected),
        )
        if name == "forget":
            assert_no_trace(copy / "lake", world["victim"])
