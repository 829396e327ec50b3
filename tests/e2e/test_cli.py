"""The CLI's promises: help lists the commands, secrets are masked, errors are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

STRATA = [sys.executable, "-m", "strata.cli"]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(STRATA + args, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def test_help_lists_every_command(tmp_path: Path) -> None:
    result = _run(["--help"], {"STRATA_HOME": str(tmp_path), "COLUMNS": "200"})
    assert result.returncode == 0
    for command in (
        "config",
        "generate",
        "demo",
        "ingest",
        "landed",
        "build",
        "prices",
        "retention",
        "forget",
        "contracts",
        "quotas",
        "sql",
        "docs",
    ):
        assert f" {command} " in result.stdout


def test_every_paragraph_of_every_commands_help_is_one_line() -> None:
    """typer's rich help keeps a paragraph's line breaks: at 80 columns a paragraph broken in the source
    showed as a short line in the middle of a sentence, and a broken summary as a short line in the list."""
    import typer

    from strata.cli import app

    def helps(group: object, path: str) -> Iterator[tuple[str, str]]:
        for name, command in getattr(group, "commands", {}).items():
            yield f"{path} {name}", command.help or ""
            yield from helps(command, f"{path} {name}")

    every = dict(helps(typer.main.get_command(app), "strata"))
    assert len(every) > 30 and every["strata ingest"].count("\n\n") == 1  # a summary and a paragraph
    broken = [name for name, text in every.items() if any("\n" in p for p in text.split("\n\n"))]
    assert not broken, broken


def test_config_masks_the_pseudonym_key(tmp_path: Path) -> None:
    secret = "super-secret-key-123456"
    result = _run(
        ["config"],
        {
            "STRATA_HOME": str(tmp_path),
            "STRATA_PSEUDONYM_KEY": secret,
            "STRATA_REDIS_URL": "redis://user:hunter2@127.0.0.1:6379/0",
            "COLUMNS": "200",
        },
    )
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert "****" in result.stdout
    assert str(tmp_path / "lake") in result.stdout


def test_errors_are_one_line_without_traceback_unless_debug(tmp_path: Path) -> None:
    env = {"STRATA_HOME": str(tmp_path), "STRATA_ONLINE_STORE": "nope"}
    result = _run(["config"], env)
    assert result.returncode == 1
    assert "error: STRATA_ONLINE_STORE" in result.stderr
    assert "Traceback" not in result.stderr
    debug = _run(["--debug", "config"], env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    level = _run(["config"], {"STRATA_HOME": str(tmp_path), "STRATA_LOG_LEVEL": "loud"})
    assert level.returncode == 1 and "error: STRATA_LOG_LEVEL must be DEBUG, INFO" in level.stderr


#: The real CLI with one more command, whose body has a bug (a KeyError), run as ``strata`` is.
BUGGY = """
import sys
from strata import cli

@cli.app.command("buggy")
def buggy() -> None:
    {"rows": 1}["event_date"]

sys.argv = ["strata", *sys.argv[1:]]
cli.main()
"""


def test_a_bug_is_called_one_and_the_hint_to_rerun_with_debug_is_true(tmp_path: Path) -> None:
    env = {**os.environ, "STRATA_HOME": str(tmp_path), "COLUMNS": "200"}
    run = [sys.executable, "-c", BUGGY]
    bug = subprocess.run([*run, "buggy"], env=env, capture_output=True, text=True, timeout=60)
    assert bug.returncode == 1 and "Traceback" not in bug.stderr
    assert bug.stderr.splitlines() == [
        "error: a bug in Strata, not in what was asked: KeyError: 'event_date'",
        "(for the traceback, run again with --debug: strata --debug buggy)",
    ]
    again = subprocess.run([*run, "--debug", "buggy"], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "Traceback" in again.stderr and "KeyError: 'event_date'" in again.stderr
    # A bad input is no bug: its one line, naming the option that sets the argument at fault, and no hint.
    (tmp_path / "logs.jsonl").write_text("")
    refused = _run(
        ["ingest", "--tenant", "a b", str(tmp_path / "logs.jsonl")], {"STRATA_HOME": str(tmp_path), "COLUMNS": "200"}
    )
    assert refused.returncode == 1
    assert refused.stderr.endswith(
        "error: tenant must be 1-128 letters, digits, '.', '_' or '-', not 'a b' (--tenant)\n"
    )
    # Nor is SQL that DuckDB cannot run: DuckDB's message and position, no hint.
    typo = _run(["sql", "selec 1"], {"STRATA_HOME": str(tmp_path), "COLUMNS": "200"})
    assert typo.returncode == 1 and "bug" not in typo.stderr and "--debug" not in typo.stderr
    assert typo.stderr.startswith('error: Parser Error: syntax error at or near "selec"') and "LINE 1:" in typo.stderr
    # Input not there yet: the library names the step that makes it, the CLI the command that runs the step.
    early = _run(["build", "ads", "--date", "2026-01-01"], {"STRATA_HOME": str(tmp_path), "COLUMNS": "200"})
    assert early.returncode == 1
    assert early.stderr.endswith("error: dwd.request does not exist: build DWD first (strata build dwd --date D)\n")


def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"STRATA_HOME": str(tmp_path), "COLUMNS": "80"}
    unknown = _run(["build", "dwd", "--foo"], env)  # was a usage line, a hint and a boxed panel
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr == "error: No such option: --foo (see 'strata build dwd --help')\n"
    long = _run(["sql", "--format", "xml", "select 1"], env)  # longer than the terminal: still one line
    assert long.returncode == 2 and long.stderr.count("\n") == 1 and "'xml' is not one of" in long.stderr


def test_a_query_opening_with_an_sql_comment_is_the_query_and_a_mistyped_option_still_named(tmp_path: Path) -> None:
    """Click took ``-- …`` for an option ("No such option"); options before or after it still count."""
    env = {"STRATA_HOME": str(tmp_path), "COLUMNS": "80"}
    query = "-- the answer, as a comment first\nselect 42 as answer"
    for args in (["sql", query, "--format", "csv"], ["sql", "-f", "csv", query], ["sql", "-f", "csv", "--", query]):
        done = _run(args, env)
        assert (done.returncode, done.stdout) == (0, "answer\n42\n"), done.stderr
    typo = _run(["sql", "--fromat", "csv", "select 1"], env)
    assert typo.returncode == 2 and "No such option: --fromat" in typo.stderr


def test_an_error_keeps_text_that_looks_like_markup(tmp_path: Path) -> None:
    missing = tmp_path / "[bold]" / "logs.jsonl"  # rich would take "[bold]" for a style and drop it
    result = _run(["ingest", str(missing)], {"STRATA_HOME": str(tmp_path)})
    assert result.returncode == 1
    assert "[bold]" in result.stderr.replace("\n", "")


def _path_parameters() -> Iterator[tuple[list[str], str, list[str], int]]:
    """Every path a command takes: its command words, the parameter's name, its option names (none for an
    argument) and, for an argument, how many arguments come before it."""
    import inspect
    import typing

    import typer

    from strata.cli import app

    def walk(command: typer.core.TyperCommand, words: list[str]) -> Iterator[tuple[list[str], str, list[str], int]]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*words, name])
        if command.callback is None:
            return
        hints = typing.get_type_hints(inspect.unwrap(command.callback))
        arguments = [p for p in command.params if not p.opts[0].startswith("-")]
        for param in command.params:
            if "Path" in str(hints.get(param.name or "")):
                option = param.opts[0].startswith("-")
                yield words, param.name or "", param.opts if option else [], 0 if option else arguments.index(param)

    yield from walk(typer.main.get_command(app), [])


def test_an_empty_path_is_refused_by_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`strata ingest "$STRATA_LANDING_DIR"` with the variable unset landed the current folder: an empty path
    reads as '.'. Every path of every command refuses one, in one line naming it, exit code 1."""
    from strata.cli import main

    cwd = tmp_path / "cwd"  # what '.' would have been
    cwd.mkdir()
    (cwd / "server.jsonl").write_text(json.dumps({"request_id": "r", "ts": "2026-02-01T12:00:00Z"}) + "\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "80")
    existing = str(Path(__file__))  # for the arguments before the one left empty
    parameters = list(_path_parameters())
    assert {" ".join(words) for words, *_ in parameters} >= {"ingest", "unland", "sql", "report", "generate"}
    for words, name, options, before in parameters:
        args = [*words, options[0], ""] if options else [*words, *[existing] * before, ""]
        monkeypatch.setattr(sys, "argv", ["strata", *args])
        with pytest.raises(SystemExit) as exit:
            main()
        said = capsys.readouterr()
        assert exit.value.code == 1, (args, said)
        assert said.out == "" and said.err.count("\n") == 1, (args, said)
        assert said.err.startswith("error: Invalid value for ") and "the path is empty" in said.err, said.err
        assert any(f"'{shown}'" in said.err for shown in [*options, name, name.upper(), "PATH"]), said.err
    assert sorted(p.name for p in cwd.iterdir()) == ["server.jsonl"] and not (tmp_path / "home" / "lake").exists()
    # As the issue ran it: a command copied from the README, the variable unset, in a fresh shell.
    shell = subprocess.run(
        ["sh", "-c", 'unset STRATA_LANDING_DIR; exec "$@" ingest "$STRATA_LANDING_DIR"', "sh", *STRATA],
        env={**os.environ, "STRATA_HOME": str(tmp_path / "home"), "COLUMNS": "200"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 1 and shell.stderr.startswith("error: Invalid value for 'PATH': the path is empty")
    assert "landed" not in shell.stdout and not (tmp_path / "home" / "lake").exists()


def test_landed_files_are_listed_and_build_dwd_takes_several_dates(tmp_path: Path) -> None:
    from tests.terminal import run_on_terminal

    env = {"STRATA_HOME": str(tmp_path / "home"), "STRATA_PSEUDONYM_KEY": "test-key-not-a-secret-0123456789"}
    landing = tmp_path / "home" / "landing"
    landing.mkdir(parents=True)
    logs, gateway = landing / "logs.jsonl", landing / "requests-gateway-eu-west-1-000001.jsonl"
    logs.write_text(
        "".join(
            json.dumps(
                {
                    "request_id": f"r{day}",
                    "ts": f"2026-02-0{day}T12:00:00Z",
                    "duration_ms": 10.0,
                    "tenant_id": "t",
                    "user_id": "u",
                    "operation": "chat",
                    "model": "m",
                    "input_tokens": 1,
                    "output_tokens": 1,
                    "status_code": 200,
                }
            )
            + "\n"
            for day in (1, 2)
        )
        + "{broken\n"
    )
    gateway.write_text(logs.read_text().splitlines()[0].replace("r1", "r3").replace("02-01", "02-03") + "\n")
    ingested = _run(["ingest"], env)  # no PATH: the landing zone
    assert ingested.returncode == 0 and "started" not in ingested.stderr  # the log shows from WARNING by default
    assert f"landing zone: {landing}" in ingested.stderr and "landed 2 file(s)" in ingested.stdout
    landed = _run(["landed"], {**env, "COLUMNS": "200"})
    row = next(line for line in landed.stdout.splitlines() if "logs.jsonl" in line)
    assert [cell.strip() for cell in row.split("│")[3:7]] == ["ods.request_log_raw", "jsonl", "3", "1"]
    # At 80 columns, on a terminal: one line per file, its path shortened from the middle and its name whole
    # (a collector's long names were cut); the columns a long name needs the room of are left out, and named.
    screen = run_on_terminal(["landed"], env)
    body = screen.lines[screen.lines.index(next(x for x in screen.lines if x.startswith("┡"))) + 1 : -2]
    assert screen.returncode == 0 and len(body) == 2 and all(line.startswith("│ 20") for line in body), screen.text
    assert f"/…/{gateway.name} │" in body[0] + body[1] and f"│ /{logs.parts[1]}/…/" in body[0] + body[1]
    assert screen.lines[-1] == "not shown at 80 columns: table, read as, malformed, batch"
    result = _run(["-v", "build", "dwd", "--date", "2026-02-02", "--date", "2026-02-01"], env)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # rich wraps long lines
    first = "dwd.request [2026-02-01] v0: ODS 2 = DWD 1 + duplicates 0 + quarantined 0 + malformed 1"
    second = "dwd.request [2026-02-02] v1: ODS 1 = DWD 1 + duplicates 0 + quarantined 0 + malformed 0"
    assert first in text and second in text and text.index(first) < text.index(second)  # in date order
    log = " ".join(result.stderr.split())  # -v: each step's log on stderr, beside its progress bar
    assert "INFO build_dwd 2026-02-01: started" in log and "request_published=1," in log
    assert "INFO dwd.request 2026-02-02: 1 ODS records from 1 file(s)" in log
