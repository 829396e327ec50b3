"""The end-to-end demo behind ``make demo``: generate, ingest, build, and check the books."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Callable

from warehouse.settings import Settings

Echo = Callable[[str], None]


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


def demo_settings(settings: Settings, params: dict[str, int | str], echo: Echo) -> Settings:
    """The demo's own corner of STRATA_HOME (``demo/``), so it never mixes with a real lake.

    The demo's lake is kept between runs with the same parameters (a re-run then shows
    that nothing is landed twice) and started afresh when they change, the generator's
    version among them (a new version writes other bytes, which would land again).
    """
    home = settings.home / "demo"
    stamp = home / "demo.json"
    if stamp.exists() and json.loads(stamp.read_text()) != params:
        echo(f"  parameters changed since the last demo: starting the demo lake at {home} afresh")
        shutil.rmtree(home)
    home.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(params))
    return dataclasses.replace(settings, home=home, lake_uri=str(home / "lake"), landing_dir=home / "landing")


def run_demo(settings: Settings, *, days: int, requests_per_day: int, seed: int, echo: Echo) -> bool:
    """Run the pipeline on generated data; True when every DWD partition matches the manifest."""
    from strata import pipeline
    from strata.console import progress
    from warehouse.sources.generator import GENERATOR_VERSION, generate
    from warehouse.tables import DWD_REQUEST, ODS_REQUESTS

    params = {"days": days, "requests_per_day": requests_per_day, "seed": seed, "generator": GENERATOR_VERSION}
    settings = demo_key(demo_settings(settings, params, echo), echo)
    landing: Path = settings.landing_dir
    start = dt.date(2026, 1, 1)
    echo(f"[bold]1/4 generate[/] {days} day(s) × {requests_per_day:,} requests (1% faulty lines) → {landing}")
    with progress("generating") as step:
        manifest = generate(landing, days=days, requests_per_day=requests_per_day, seed=seed, start=start,
                            fault_rate=0.01, progress=step)
    echo(f"  {len(manifest['abusive_user_ids'])} planted abusive users, "
         f"{manifest['feedback']['lines']:,} feedback events")

    echo(f"[bold]2/4 ingest[/] into ODS at {ODS_REQUESTS.uri(settings)}")
    with progress("ingesting") as step:
        landed = pipeline.land(settings, [landing / "requests", landing / "feedback"], progress=step)
    echo(f"  landed {landed.counts['files_landed']} file(s), skipped {landed.counts['files_skipped']} already landed")
    pipeline.load_prices(settings, landing / "prices.csv")
    pipeline.load_quotas(settings, landing / "quotas.csv")

    echo("[bold]3/4 build the layers, one after the other, for each day[/] (DWD: feedback first, so labels "
         "reach earlier requests; the layers above: the days with traffic)")
    all_ok = True
    every_day = sorted(set(manifest["feedback"]["days"]) | set(manifest["days"]))
    for step_fn in pipeline.DAILY:
        for day in every_day if step_fn is pipeline.build_dwd else sorted(manifest["days"]):
            with progress(f"{day}") as step:
                result = step_fn(settings, dt.date.fromisoformat(day), progress=step)
            if step_fn is not pipeline.build_dwd:
                echo(f"  {result.step} {day}: " + ", ".join(f"{name.removesuffix('_rows')} {rows:,}"
                                                           for name, rows in result.counts.items()) + " row(s)")
                continue
            for run in result.detail.values():
                b = run.books
                line = (f"  {b.table} {day}: ODS {b.ods_rows:,} = DWD {b.dwd_rows:,} + duplicates {b.duplicates:,}"
                        f" + quarantined {b.quarantined:,} + malformed {b.malformed:,}")
                if run.table == DWD_REQUEST:
                    truth = manifest["days"][day]
                    ok = b.dwd_rows == truth["requests"] and b.duplicates == truth["duplicates"]
                    all_ok &= ok
                    line += "  [green]= manifest[/]" if ok else "  [red]≠ manifest[/]"
                echo(line)

    echo("[bold]4/4 where to look[/]")
    echo(f"  lake: {settings.lake_uri}  (Delta tables: ods/*, dwd/*, ads/*, ops/*)")
    echo(f"  SQL: STRATA_HOME={settings.home} strata sql \"select * from ads.tenant_daily order by cost_usd desc\"")
    echo("  e.g. python -c \"import deltalake; print(deltalake.DeltaTable("
         f"'{DWD_REQUEST.uri(settings)}').to_pandas().head())\"")
    return all_ok
