"""``strata explain`` on a week of 1,000,000-request days: one mart row down the layers, against hand-written DuckDB.

Ours: :func:`warehouse.ads.explain.explain` for rows of ``ads.model_daily`` and ``ads.tenant_daily`` (the
busiest of each day), in one warm process: the row, the versions its build read (each checked to be still
there), its DWD rows counted and sampled with their ODS files and lines, and every ODS line of its day
accounted for.

Baseline (named, same run, same Delta tables, same process as ours): the queries a person would write in
DuckDB for the same answer — the row, the audit log's row of its build, its DWD rows' count, sample and lines
per ODS file, the fate of each ODS line of its day and the quarantine by rule — each fetched whole. The ratio is
ours against the same reads done bare; the target is ours within 2× of them.

The lake is ``bench_ads``'s week (built once, kept in ``$STRATA_BENCH_CACHE``), its marts built here when it
has none yet.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_ads import KEY, week_lake
from benchmarks.harness import Measurement, scaled

#: Rows explained, alternately of each mart.
ROWS = scaled(10, 2)

_TIMED = r"""
import datetime as dt, json, sys, time
from warehouse.ads.build import build
from warehouse.ads.explain import explain
from warehouse.settings import load_settings
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.tables import (
    ADS_MODEL_DAILY, ADS_TENANT_DAILY, DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, ODS_REQUESTS, OPS_AUDIT_LOG
)
settings = load_settings({"STRATA_HOME": sys.argv[1], "STRATA_PSEUDONYM_KEY": sys.argv[2]})
days = [dt.date.fromisoformat(d) for d in sys.argv[4:]]
if not Lake(settings).exists(ADS_MODEL_DAILY):
    build(Lake(settings), days)
con = lake_reader(settings)
tables = (ADS_MODEL_DAILY, ADS_TENANT_DAILY, DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, ODS_REQUESTS, OPS_AUDIT_LOG)
u = {t.name: t.uri(settings) for t in tables}
rows = []
for mart, key in (("ads.model_daily", ("model", "model_version")), ("ads.tenant_daily", ("tenant_id",))):
    for day in days:
        r = con.execute(
            f"SELECT {', '.join(key)} FROM delta_scan('{u[mart]}') WHERE event_date = '{day}' "
            "ORDER BY requests DESC LIMIT 1"
        ).fetchone()
        rows.append((mart, [f"event_date={day}", *(f"{k}={v}" for k, v in zip(key, r))]))
rows = [rows[(i // 2) + (i % 2) * len(days)] for i in range(len(rows))][: int(sys.argv[3])]

def by_hand(mart, pairs):
    key = dict(p.split("=", 1) for p in pairs)
    day = key["event_date"]
    if mart == "ads.model_daily":
        where = f"model = '{key['model']}' AND coalesce(model_version, '(none)') = '{key['model_version']}'"
    else:
        where = f"tenant_id = '{key['tenant_id']}' AND model IS NOT NULL"
    ads_where = " AND ".join(f"{k} = '{v}'" for k, v in key.items())
    q = [
        f"SELECT * FROM delta_scan('{u[mart]}') WHERE {ads_where}",
        f"SELECT * FROM delta_scan('{u['ops.audit_log']}') WHERE table_name = '{mart}' AND status = 'published' "
        f"AND contains(partition, 'event_date = ''{day}''') ORDER BY started_at DESC LIMIT 1",
        f"CREATE OR REPLACE TEMP TABLE mine AS SELECT request_id, ts, source_file, line_no "
        f"FROM delta_scan('{u['dwd.request']}') WHERE event_date = '{day}' AND {where}",
        "SELECT count(*) FROM mine",
        "SELECT * FROM mine ORDER BY ts, request_id LIMIT 5",
        "SELECT source_file, count(*), min(line_no), max(line_no) FROM mine GROUP BY 1",
        f"SELECT CASE WHEN (source_file, line_no) IN (SELECT (source_file, line_no) FROM mine) THEN 1 "
        f"WHEN (source_file, line_no) IN (SELECT (source_file, line_no) FROM delta_scan('{u['dwd.request']}') "
        f"WHERE event_date = '{day}' UNION ALL SELECT (source_file, line_no) FROM delta_scan('{u['dwd.span']}') "
        f"WHERE event_date = '{day}') THEN 2 "
        f"WHEN (source_file, line_no) IN (SELECT (source_file, line_no) FROM delta_scan('{u['dwd.quarantine']}') "
        f"WHERE event_date = '{day}') THEN 3 "
        f"WHEN request_id IN (SELECT request_id FROM delta_scan('{u['dwd.request']}') WHERE event_date = '{day}') "
        f"THEN 4 ELSE 5 END, count(*) FROM delta_scan('{u['ods.request_log_raw']}') "
        f"WHERE event_date = '{day}' GROUP BY 1",
        f"SELECT rule, count(*) FROM (SELECT unnest(rules) AS rule FROM delta_scan('{u['dwd.quarantine']}') "
        f"WHERE event_date = '{day}') GROUP BY 1",
    ]
    return sum(len(con.execute(s).fetchall()) for s in q)

started = time.perf_counter()
explain(Lake(settings), *rows[0])
first_s = time.perf_counter() - started
ours, base, summarised = [], [], 0
for mart, pairs in rows:  # alternately, so that the machine's drift falls on both
    started = time.perf_counter()
    found = explain(Lake(settings), mart, pairs)
    ours.append(time.perf_counter() - started)
    started = time.perf_counter(); by_hand(mart, pairs); base.append(time.perf_counter() - started)
    summarised += found.rows
    assert found.partitions[0].unaccounted == 0, (mart, pairs)
print(json.dumps({"first_s": first_s, "ours": ours, "base": base, "rows": summarised}))
"""


def run(workdir: Path) -> list[Measurement]:
    home, manifest = week_lake()
    done = subprocess.run(
        [sys.executable, "-c", _TIMED, str(home), KEY, str(ROWS), *manifest["days"]],
        check=True,
        capture_output=True,
        text=True,
    )
    timed = json.loads(done.stdout.strip().splitlines()[-1])
    ours, base = statistics.median(timed["ours"]), statistics.median(timed["base"])
    return [
        Measurement(
            f"explain(), one mart row, warm process (median of {len(timed['ours'])}; {timed['rows']:,} DWD rows)",
            ours,
            "s",
            "hand-written DuckDB: the row, its build, its DWD rows and lines, its day's ODS lines accounted for",
            base,
            higher_is_better=False,
            target_ratio=0.5,
        ),
        Measurement(
            "explain(), the first row of a process (DuckDB's delta extension loaded)",
            timed["first_s"],
            "s",
            "hand-written DuckDB, warm (median)",
            base,
            higher_is_better=False,
        ),
    ]
