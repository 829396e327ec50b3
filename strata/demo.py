"""The end-to-end demo behind ``make demo``: a generated week run through the real DAGs, then the lake shown.

The DAGs run through Airflow's ``dag.test()`` in a child process (the CLI never imports
Airflow), day by day, as a scheduler would: each day's files arrive in the landing zone,
``strata_ingest`` lands them, ``strata_daily`` builds that day's layers. The summary prints
every section whose layer exists and one line for each that does not.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from warehouse.settings import Settings

if TYPE_CHECKING:
    from strata.orchestration.dag_runs import Run, RunReport

Echo: TypeAlias = Callable[[Any], None]


def demo_key(settings: Settings, echo: Echo) -> Settings:
    """Settings with a pseudonym key: the configured one, else a random one kept under STRATA_HOME."""
    if settings.pseudonym_key:
        return settings
    path = settings.home / "secrets" / "pseudonym.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
        echo(f"  no STRATA_PSEUDONYM_KEY set: created a random demo key in {path} (mode 600)")
    return dataclasses.replace(settings, pseudonym_key=path.read_text().strip())


#: Reviews arrive up to 3 days after their request (synthetic_workload.feedback): a demo of N days
#: of traffic holds data on N + 3 days at most.
LATE_DAYS = 3


def demo_home(settings: Settings) -> Path:
    """The demo's corner: ``STRATA_HOME/demo``, or STRATA_HOME itself when it is one (after
    ``eval "$(strata demo env)"``), so a demo is never nested in another."""
    return settings.home if (settings.home / "demo.json").exists() else settings.home / "demo"


def demo_settings(
    settings: Settings, params: dict[str, int | str], echo: Echo, *, today: dt.date | None = None
) -> tuple[Settings, dt.date]:
    """The demo's own corner of STRATA_HOME (``demo/``), so it never mixes with a real lake, and
    its first day.

    A new demo's days end yesterday at the latest (its late reviews included), so a scheduler
    started on its lake meets nothing in the future, and retention (counted back from today)
    keeps all of it. The first day is kept in ``demo.json`` with the parameters: a re-run uses
    the same dates, hence the same bytes (and shows that nothing is landed twice). The corner is
    started afresh when the parameters change (the generator's version among them: a new
    version writes other bytes, which would land again), and when the first day has fallen
    out of the raw-data retention (a scheduler's retention has removed, or will remove, its ODS).
    """
    today = today or dt.datetime.now(dt.UTC).date()
    home = demo_home(settings)
    stamp = home / "demo.json"
    kept = json.loads(stamp.read_text()) if stamp.exists() else None
    start = dt.date.fromisoformat(kept["start"]) if kept and "start" in kept else None
    if kept is not None and (start is None or kept != {**params, "start": kept["start"]}):
        echo(f"  parameters changed since the last demo: starting the demo lake at {home} afresh")
        shutil.rmtree(home)
        start = None
    elif start is not None and start < today - dt.timedelta(days=settings.ods_retention_days):
        echo(
            f"  the last demo began on {start}, older than the {settings.ods_retention_days}-day raw-data "
            f"retention: starting the demo lake at {home} afresh, on recent dates"
        )
        shutil.rmtree(home)
        start = None
    if start is None:
        start = today - dt.timedelta(days=int(params["days"]) + LATE_DAYS)
    home.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({**params, "start": start.isoformat()}))
    return dataclasses.replace(
        settings,
        home=home,
        lake_uri=str(home / "lake"),
        landing_dir=home / "landing",
        feast_dir=home / "feast",
        registry_dir=home / "models",
        airflow_home=home / "airflow",
    ), start


def reset(settings: Settings) -> Path:
    """Remove the demo's corner of STRATA_HOME (its lake, files, key, Airflow home); returns it."""
    home = demo_home(settings)
    shutil.rmtree(home, ignore_errors=True)
    return home


def env_line(settings: Settings) -> str:
    """One shell line to ``eval``: the demo's STRATA_HOME, its key read from its file (the key itself
    is never printed; none when the demo uses a configured key), and this project's ``strata`` on the PATH."""
    import shlex

    home = demo_home(settings)
    key = home / "secrets" / "pseudonym.key"
    line = f"export STRATA_HOME={shlex.quote(str(home))}"
    if key.exists():
        line += f' STRATA_PSEUDONYM_KEY="$(cat {shlex.quote(str(key))})"'
    return line + f' PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"'


def arrive(generated: Path, landing: Path, day: str) -> int:
    """Copy the files that arrive on ``day`` into the landing zone, as the AI service would
    drop them (requests by their hour, feedback by its arrival day); returns how many."""
    count = 0
    for kind in ("requests", "feedback"):
        source = generated / kind / f"date={day}"
        if source.is_dir():
            shutil.copytree(source, landing / kind / f"date={day}", dirs_exist_ok=True)
            count += sum(1 for p in source.rglob("*") if p.is_file())
    return count


def daily_plan(days: list[str], last_traffic: str, *, trained: bool, empty: Collection[str] = ()) -> list[Run]:
    """The DAG runs of the demo: each day's last ingest run, then that day's layers. Then, with
    every late label in, the weekly training up to the day before the last day of traffic, and
    that last day's scores (scoring needs a model, and a model scores the days after it); its
    ADS build catches up the labels the feedback-only days merged into the days before it. The
    last run writes the report of the week ending with the last day of traffic.

    A day in ``empty`` (its files hold no event: a day without traffic or reviews) is landed and
    not built: DWD refuses a day with no rows, as a scheduler's run would be told."""
    from strata.orchestration.dag_runs import Run

    def midnight_after(day: str) -> dt.datetime:
        return dt.datetime.combine(dt.date.fromisoformat(day) + dt.timedelta(days=1), dt.time(), dt.UTC)

    runs: list[Run] = []
    for day in days:  # a day with feedback but no traffic: its DWD only (nothing above it to build)
        layers = BEFORE_SCORES if day <= last_traffic else DWD_ONLY
        runs.append(Run("strata_ingest", midnight_after(day)))
        if day not in empty:
            runs.append(Run("strata_daily", midnight_after(day), tasks=layers))
    last = midnight_after(last_traffic)
    if trained:
        # The whole daily DAG again (its layers are idempotent): a subset holding only the mapped
        # scoring tasks loses their expansion in Airflow 3.3's partial_subset. Its last task writes the report.
        runs += [Run("strata_train", last - dt.timedelta(days=1)), Run("strata_daily", last)]
    else:  # no scores to wait for: the report of the week up to the last day of traffic, every label in
        runs.append(Run("strata_daily", last, tasks=REPORT_ONLY))
    return runs


#: The daily DAG's task groups before scoring (regular expressions on task ids).
BEFORE_SCORES = r"^(dwd|dws|features|ads)\."
DWD_ONLY = r"^dwd\."
REPORT_ONLY = r"^report\."


def run_demo(settings: Settings, *, days: int, requests_per_day: int, seed: int, echo: Echo) -> bool:
    """Generate a week of logs and run the real DAGs through Airflow, day by day; True when every
    day's DWD requests and duplicates match the generator's manifest and every DAG run succeeded."""
    from synthetic_workload import GENERATOR_VERSION

    params: dict[str, int | str] = {
        "days": days,
        "requests_per_day": requests_per_day,
        "seed": seed,
        "generator": GENERATOR_VERSION,
    }
    settings, start = demo_settings(settings, params, echo)
    settings = demo_key(settings, echo)
    generated = settings.home / "generated"
    manifest = _generate(generated, start=start, days=days, requests_per_day=requests_per_day, seed=seed, echo=echo)
    if not _run_dags(settings, generated, manifest, days=days, echo=echo):
        return False
    _show_lake(settings, manifest, echo)
    return True


def _generate(generated: Path, *, start: dt.date, days: int, requests_per_day: int, seed: int, echo: Echo) -> dict:
    """Step 1: the week's files, with faults, late duplicates and late feedback; the generator's manifest."""
    echo(
        f"[bold]1/3 generate[/] {days} day(s) × {requests_per_day:,} requests from {start} with faults (1% of "
        f"lines), late duplicates and late feedback → {generated}"
    )
    manifest = generate_with_progress(
        generated, start=start, days=days, requests_per_day=requests_per_day, seed=seed, fault_rate=0.01
    )
    echo(
        f"  {len(manifest['abusive_user_ids'])} planted abusive users, "
        f"{manifest['feedback']['lines']:,} feedback events arriving up to 3 days late"
    )
    return manifest


def generate_with_progress(
    folder: Path, *, start: dt.date, days: int, requests_per_day: int, seed: int, fault_rate: float
) -> dict:
    """The generator's dataset written into ``folder`` under a progress bar (``strata generate``, the demo);
    its manifest."""
    from strata.console import progress
    from synthetic_workload import generate

    with progress("generating") as step:
        return generate(
            folder,
            days=days,
            requests_per_day=requests_per_day,
            seed=seed,
            start=start,
            fault_rate=fault_rate,
            progress=step,
        )


def _run_dags(settings: Settings, generated: Path, manifest: dict, *, days: int, echo: Echo) -> bool:
    """Step 2: the DAG runs, day by day, each day's files arriving before its ingest; True when every
    run succeeded and matched the manifest (else a way out is printed)."""
    from strata.console import progress
    from strata.orchestration.dag_runs import run_dags

    all_days = sorted(set(manifest["feedback"]["days"]) | set(manifest["days"]))
    # a model learns from the days before the last day of traffic
    trained = len(manifest["days"]) >= 2
    empty = {day for day, events in manifest["feedback"]["days"].items() if not events and day not in manifest["days"]}
    plan = daily_plan(all_days, max(manifest["days"]), trained=trained, empty=empty)
    echo(
        f"[bold]2/3 run the DAGs through Airflow[/] ({len(plan)} runs with dag.test(), day by day: "
        f"strata_ingest, then strata_daily{', then strata_train and the scores' if trained else ''}); "
        f"Airflow's log: {settings.airflow_home / 'demo.log'}"
    )
    for reference in ("prices.csv", "quotas.csv"):
        shutil.copy(generated / reference, _landing(settings) / reference)
    if not trained:
        echo(
            f"  training and scores: a model learns from the days before the last day of traffic, and "
            f"{days} day(s) have none: skipped (try --days 7)"
        )
    all_ok = True
    reports: list[RunReport] = []
    with progress("DAG runs") as step:

        def finished(report: RunReport) -> None:
            nonlocal all_ok
            reports.append(report)
            all_ok &= _echo_run(report, manifest, echo)
            step(f"{report.dag_id} {report.interval[0][:10]}", len(reports), len(plan))

        def files_arrive(run: Run) -> None:
            if run.dag_id == "strata_ingest":
                arrive(generated, _landing(settings), _day_of(run))

        step("starting Airflow", 0, len(plan))
        try:
            run_dags(settings, plan, log=settings.airflow_home / "demo.log", before=files_arrive, on_run=finished)
        except RuntimeError as exc:  # the Airflow child ended before its runs did
            echo(f"  [red]{exc}[/]")
    if len(reports) < len(plan):
        all_ok = False
        echo(f"  [red]stopped after {len(reports)} of {len(plan)} runs[/]")
    if not all_ok:  # the lake is not what the demo says it is: no report of it, and a way out
        echo(
            f"[red]FAILED[/]: the demo's DAG runs did not all succeed (Airflow's log: "
            f"{settings.airflow_home / 'demo.log'}); `strata demo --reset` starts it over"
        )
    return all_ok


def _show_lake(settings: Settings, manifest: dict, echo: Echo) -> None:
    """Step 3: every section of the lake, around the last day of traffic and one planted abusive user."""
    from strata import lake_report
    from warehouse.privacy import pseudonym
    from warehouse.storage.lake import Lake

    echo("[bold]3/3 what the lake holds[/]")
    last = dt.date.fromisoformat(max(manifest["days"]))
    lake = Lake(settings)
    lake_report.tables_section(lake, echo)
    lake_report.quarantine_section(lake, echo)
    lake_report.books_section(lake, echo)
    lake_report.ads_section(lake, echo, last)
    lake_report.operators_section(lake, echo, last)
    user = (manifest["abusive_user_ids"] or ["u_0"])[0]  # an abusive user, whose features stand out
    lake_report.features_section(settings, echo, user)
    key = settings.require_pseudonym_key()
    planted = frozenset(pseudonym(key, u) for u in manifest["abusive_user_ids"])
    lake_report.model_section(lake, echo, last, planted)
    lake_report.report_section(settings, echo, last)
    _next_commands(settings, echo, user, lake_report.open_commands(lake, last))


def _landing(settings: Settings) -> Path:
    settings.landing_dir.mkdir(parents=True, exist_ok=True)
    return settings.landing_dir


def _day_of(run: Run) -> str:
    assert run.at is not None  # the demo's runs are dated
    return (run.at - dt.timedelta(days=1)).date().isoformat()


def _echo_run(report: RunReport, manifest: dict, echo: Echo) -> bool:
    """One line per DAG run (and the error of each task that failed); for a daily run, its DWD counts
    against the manifest. True when the run succeeded and they match."""
    from strata.console import Clauses

    day = report.interval[0][:10]
    states = list(report.tasks.values())
    mark = "[green]✓[/]" if report.ok else "[red]✗[/]"
    events = sum(map(len, report.events.values()))
    line = [  # at 80 columns, broken between its clauses only
        f"  {mark} {report.dag_id} {day}:",
        f" {states.count('success')} task(s) ran,",
        f" {states.count('skipped')} skipped,",
        f" {events} asset event(s),",
        f" {report.seconds:.1f} s",
    ]
    ok = True
    dwd = report.results.get("dwd.build_dwd")
    if dwd and day in manifest["days"]:
        counts, truth = dwd["counts"], manifest["days"][day]
        ok = (
            counts.get("request_published") == truth["requests"]
            and counts.get("request_duplicates") == truth["duplicates"]
        )
        line[-1] += ";"
        line += [
            f" DWD {counts.get('request_published', 0):,} requests,",
            f" {counts.get('request_duplicates', 0):,} duplicates",
            "  [green]= manifest[/]" if ok else "  [red]≠ manifest[/]",
        ]
    landed = report.results.get("land")
    if landed:
        line[-1] += ";"
        line.append(f" landed {landed['counts']['files_landed']} file(s)")
    echo(Clauses(line))
    for task, error in report.errors.items():
        echo(f"    [red]{task}: {error}[/]")
    return report.ok and ok


def _next_commands(settings: Settings, echo: Echo, user_id: str, opens: list[str]) -> None:
    from strata.console import Command

    def command(line: str) -> None:  # one line however narrow the terminal: copied, it runs as printed
        echo(Command(f"  {line}"))

    echo(
        "[bold]next[/] (once per shell, the first line puts `strata` on the PATH and the demo's lake and key in "
        "STRATA_HOME and STRATA_PSEUDONYM_KEY)"
    )
    strata = Path(sys.executable).parent / "strata"
    command(f'eval "$(STRATA_HOME={settings.home.parent} {strata} demo env)"')
    for line in (
        'strata sql "SELECT tenant_id, sum(cost_usd) FROM dwd.request GROUP BY 1 ORDER BY 2 DESC"',
        *opens,  # a mart row and a workflow down to their raw lines (strata explain, strata trace)
        f"strata features get user={user_id}",
        "strata model show user_risk",
        "strata report --out strata-report.html   # a local copy of the week's report",
        "strata airflow up   # the same DAGs on a schedule, on this lake: http://127.0.0.1:8080",
        "strata landed --last 5",
        "strata demo --reset   # start the demo over",
    ):
        command(line)
    echo(f"  lake: {settings.lake_uri}  (Delta tables: ods/*, dwd/*, ops/*, …; any Delta reader opens them)")
