"""``strata airflow up|down``: Airflow with Strata's DAGs on this machine, the embedded default.

``up`` starts ``airflow standalone`` in the background — SQLite metadata and the
LocalExecutor, its home under ``STRATA_HOME/airflow``, the API server on 127.0.0.1, the
DAGs unpaused, no examples — waits until it answers, and prints where to log in (the admin
password once). ``down`` stops it. Airflow runs in its own processes: this command never
imports it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import typer

from strata.console import console, out

app = typer.Typer(
    help="Run Airflow with Strata's DAGs on this machine (SQLite metadata, LocalExecutor).", no_args_is_help=True
)

_PID = "standalone.pid"
_LOG = "standalone.log"
_PASSWORDS = "simple_auth_manager_passwords.json.generated"
_SHOWN = ".admin_password_shown"


def _running(home: Path) -> int | None:
    """The pid of the standalone Airflow started from this home, if it is still alive."""
    try:
        pid = int((home / _PID).read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2) as response:
            health = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return all(health.get(part, {}).get("status") == "healthy" for part in ("metadatabase", "scheduler"))


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


@app.command("up")
def up_cmd(
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port of Airflow's API server and UI."),
    timeout: float = typer.Option(180, "--timeout", min=1, help="Seconds to wait for Airflow to answer."),
) -> None:
    """Start Airflow (standalone) with Strata's DAGs in the background; prints where to log in."""
    from contracts.errors import TransientError
    from strata.orchestration.env import airflow_env, dags_folder
    from warehouse.settings import load_settings

    settings = load_settings()
    settings.require_pseudonym_key()  # the DAGs' builds need it: say so now, not in a task log at midnight
    home = settings.airflow_home
    if pid := _running(home):
        out.print(f"Airflow is already running (pid {pid}) from {home}: http://127.0.0.1:{port}")
        return
    settings.landing_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **airflow_env(settings, port=port)}
    log = home / _LOG
    with open(log, "ab") as handle:
        process = subprocess.Popen(
            [str(Path(env["PATH"].split(os.pathsep)[0]) / "airflow"), "standalone"],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (home / _PID).write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    with console.status(f"starting Airflow (home {home}, log {log})"):
        while not _healthy(port):
            if process.poll() is not None:
                (home / _PID).unlink(missing_ok=True)
                raise TransientError(
                    f"Airflow stopped while starting (exit {process.returncode}); last lines of {log}:\n{_tail(log)}"
                )
            if time.monotonic() > deadline:
                raise TransientError(
                    f"Airflow did not answer on port {port} within {timeout:.0f} s; "
                    f"see {log}, and `strata airflow down` to stop it"
                )
            time.sleep(1)
    out.print(f"Airflow is up: http://127.0.0.1:{port}  (DAGs from {dags_folder()}, lake {settings.lake_uri})")
    passwords = home / _PASSWORDS
    if passwords.exists() and not (home / _SHOWN).exists():
        for user, password in json.loads(passwords.read_text()).items():
            out.print(f"  log in as {user} with password {password}  (shown once; kept in {passwords})")
        (home / _SHOWN).touch()
    else:
        out.print(f"  log in as admin; the password is in {passwords}")
    out.print("  stop it with: strata airflow down")


@app.command("down")
def down_cmd(
    timeout: float = typer.Option(60, "--timeout", min=1, help="Seconds to wait before stopping it forcibly."),
) -> None:
    """Stop the Airflow that `strata airflow up` started."""
    from warehouse.settings import load_settings

    home = load_settings().airflow_home
    pid = _running(home)
    if pid is None:
        (home / _PID).unlink(missing_ok=True)
        out.print(f"Airflow is not running from {home}")
        return
    # SIGINT: standalone stops its scheduler, API server, DAG processor and triggerer itself.
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _group_alive(pid):  # what did not stop in time: the whole process group `up` started
        os.killpg(pid, signal.SIGKILL)
    (home / _PID).unlink(missing_ok=True)
    out.print(f"Airflow stopped (pid {pid})")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
