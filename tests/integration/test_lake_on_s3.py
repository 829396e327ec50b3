"""The lake on S3 (a moto server speaking the S3 protocol on 127.0.0.1): every place that touches
the lake — deltalake, pyarrow (the ODS scan, the mapping registry, snapshots for forget), DuckDB's
httpfs, an analyst's sandboxed SQL session — reaches it through the same settings."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.fs as pafs
import pytest

from strata import pipeline
from synthetic_workload import generate
from tests.conftest import AZURE_SAMPLE, SHIPPED_AZURE_MAPPING
from tests.services import S3_KEYS, create_bucket, s3_server
from warehouse.privacy import pseudonym
from warehouse.settings import Settings, load_settings
from warehouse.sql.sandbox import QueryRefused, Session
from warehouse.storage.duck import connect
from warehouse.storage.lake import Lake
from warehouse.storage.objectstore import configure_duckdb, filesystem
from warehouse.tables import ADS_USER_RISK_SCORES, DWD_REQUEST, ODS_REQUESTS


@pytest.fixture
def settings(tmp_path: Path, strata_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings of a lake in a bucket of a fresh moto server, from the environment as a worker reads them."""
    with s3_server(tmp_path / "moto.log") as endpoint:
        create_bucket(endpoint, "lake")
        for name, value in {
            "STRATA_LAKE_URI": "s3://lake/strata",
            "STRATA_S3_ENDPOINT_URL": endpoint,
            "STRATA_S3_REGION": "us-east-1",
            **S3_KEYS,
        }.items():
            monkeypatch.setenv(name, value)
        yield load_settings()


def test_ingest_build_forget_retention_and_duckdb_on_an_s3_lake(tmp_path: Path, settings: Settings) -> None:
    day = dt.date(2026, 1, 1)
    manifest = generate(tmp_path / "gen", days=1, requests_per_day=200, seed=5, start=day, fault_rate=0.02)
    pipeline.land(settings, [tmp_path / "gen" / "requests", tmp_path / "gen" / "feedback"])
    pipeline.load_prices(settings, tmp_path / "gen" / "prices.csv")
    built = pipeline.build_dwd(settings, day)
    assert built.counts["request_published"] == manifest["days"][str(day)]["requests"]
    assert DWD_REQUEST.uri(settings) == "s3://lake/strata/dwd/request"

    # A mapped CSV: its mapping is kept beside ODS, in the bucket, and DWD reads it back from there.
    pipeline.land(settings, [AZURE_SAMPLE], mapping=SHIPPED_AZURE_MAPPING)
    fs, root = filesystem(settings, settings.lake_uri)
    assert [i.base_name for i in fs.get_file_info(pafs.FileSelector(root + "/ods/_mappings"))]
    azure_day = dt.date(2023, 11, 16)
    assert pipeline.build_dwd(settings, azure_day).counts["request_published"] > 0

    # forget reads snapshots with pyarrow's S3 filesystem and rewrites on S3.
    with gzip.open(next((tmp_path / "gen" / "requests").rglob("*.jsonl.gz"))) as handle:
        user = next(json.loads(line)["user_id"] for line in handle if b'"user_id"' in line)
    victim = pseudonym(settings.require_pseudonym_key(), user)
    assert Lake(settings).read_frame(DWD_REQUEST).filter(pl.col("user_pseudonym") == victim).height > 0
    removed = pipeline.forget(settings, user)
    assert removed.counts["dwd.request_removed"] > 0
    assert Lake(settings).read_frame(DWD_REQUEST).filter(pl.col("user_pseudonym") == victim).height == 0

    # DuckDB reads the Delta tables on S3 through the Delta log (httpfs from its wheel, a session secret).
    con = connect()
    configure_duckdb(con, settings)
    con.execute("LOAD delta")
    in_duckdb = con.execute(f"SELECT count(*) FROM delta_scan('{DWD_REQUEST.uri(settings)}')").fetchone()
    assert in_duckdb == (Lake(settings).read(DWD_REQUEST).num_rows,)

    # An analyst's session (strata sql) reads the tables on S3 and nothing else: raw lines stay out, and
    # the store's secret, which the session holds, shows redacted.
    with Session(settings) as session:
        assert session.query("select count(*) as n from dwd.request").column("n")[0].as_py() == in_duckdb[0]
        assert "ods.request_log_raw" not in {v.name for v in session.views}
        raw_files = f"select count(*) from read_parquet('{ODS_REQUESTS.uri(settings)}/**/*.parquet')"
        with pytest.raises(QueryRefused, match="read_parquet"):
            session.query(raw_files)
        with pytest.raises(duckdb.PermissionException):  # beneath the check, DuckDB's sandbox
            session.con.execute(raw_files)
        with pytest.raises(QueryRefused, match="duckdb_secrets"):
            session.query("select secret_string from duckdb_secrets()")
        secrets = session.con.execute("select secret_string from duckdb_secrets()").fetchall()
        assert secrets and S3_KEYS["AWS_SECRET_ACCESS_KEY"] not in str(secrets)
        with pytest.raises(duckdb.InvalidInputException):
            session.con.execute("select * from duckdb_secrets(redact = false)")

    # Retention deletes and vacuums raw partitions on S3.
    deleted = pipeline.apply_retention(settings, days=1, today=dt.date(2026, 3, 1))
    assert deleted.counts["ods.request_log_raw_deleted"] > 0
    assert Lake(settings).read(ODS_REQUESTS).num_rows == 0


@pytest.mark.slow  # ~35 s: enough traffic for reviews to label both classes, every read through moto
def test_training_and_scoring_on_an_s3_lake(tmp_path: Path, settings: Settings) -> None:
    start = dt.date(2026, 1, 1)
    days = [start + dt.timedelta(days=i) for i in range(4)]
    generate(tmp_path / "gen", days=len(days), requests_per_day=3_000, seed=5, start=start)
    pipeline.land(settings, [tmp_path / "gen" / "requests", tmp_path / "gen" / "feedback"])
    for day in days:
        pipeline.build_dwd(settings, day)
        pipeline.build_dws(settings, day)
        pipeline.materialize(settings, day)

    # The training set is the point-in-time join over the Delta log on S3 (Feast's offline store
    # cannot read an s3:// Delta table); the scores go to S3 and to the online store.
    trained = pipeline.train(settings, days[2], days=3).detail
    assert trained.card.training_window == (str(days[0]), str(days[2]))
    scored = pipeline.score(settings, days[3], provider="cpu")
    scores = Lake(settings).read_frame(ADS_USER_RISK_SCORES)
    users = Lake(settings).read_frame(DWD_REQUEST, filters=[("event_date", "=", days[3])])
    assert scored.counts["entities"] == scores.height == users.get_column("user_pseudonym").drop_nulls().n_unique()
    assert ADS_USER_RISK_SCORES.uri(settings).startswith("s3://")
    # The busiest user of the scored day: their score is in the table and online.
    day_files = (tmp_path / "gen" / "requests" / f"date={days[3]}").rglob("*.jsonl.gz")
    users_of_day = Counter(
        re.findall(rb'"user_id": ?"(u_[0-9a-f]+)"', b"".join(gzip.decompress(f.read_bytes()) for f in day_files))
    )
    user = users_of_day.most_common(1)[0][0].decode()
    mine = scores.filter(pl.col("user_pseudonym") == pseudonym(settings.require_pseudonym_key(), user))
    assert mine.height == 1 and pipeline.get_online_features(settings, "user", user)["score"] == pytest.approx(
        mine["score"][0]
    )
