"""Settings and the table registry: defaults, overrides and errors that name the variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts import ContractError
from warehouse.settings import (
    DOCS_PAGE,
    CollectSettings,
    ConfigError,
    Settings,
    docs_page,
    load_collect_settings,
    load_settings,
    reference_table,
)
from warehouse.tables import DWD_REQUEST, ODS_REQUESTS, all_tables, table


def test_defaults_live_under_home(tmp_path: Path) -> None:
    s = load_settings({"STRATA_HOME": str(tmp_path)})
    assert s.home == tmp_path
    assert s.lake_uri == str(tmp_path / "lake")
    assert DWD_REQUEST.uri(s) == f"{tmp_path}/lake/dwd/request"
    assert s.online_store == "sqlite"
    assert s.pseudonym_key is None


def test_sql_bounds_have_defaults_and_travel_to_a_child(tmp_path: Path) -> None:
    s = load_settings({"STRATA_HOME": str(tmp_path)})
    assert (s.sql_timeout_s, s.sql_memory_limit, s.sql_spill_limit) == (300.0, "2GB", "10GB")
    tuned = load_settings(
        {
            "STRATA_HOME": str(tmp_path),
            "STRATA_SQL_TIMEOUT_S": "2.5",
            "STRATA_SQL_MEMORY_LIMIT": "512MiB",
            "STRATA_SQL_SPILL_LIMIT": "1.5GB",
            "STRATA_LAKE_READER_MEMORY": "64MiB",
        }
    )
    assert load_settings(tuned.to_env()) == tuned


def test_lake_uri_override_keeps_remote_uris(tmp_path: Path) -> None:
    s = load_settings({"STRATA_HOME": str(tmp_path), "STRATA_LAKE_URI": "s3://bucket/lake/"})
    assert ODS_REQUESTS.uri(s) == "s3://bucket/lake/ods/request_log_raw"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STRATA_ONLINE_STORE": "memcached"}, "STRATA_ONLINE_STORE"),
        ({"STRATA_PSEUDONYM_KEY": "short"}, "at least 16"),
        ({"STRATA_ODS_RETENTION_DAYS": "-3"}, "STRATA_ODS_RETENTION_DAYS"),
        ({"STRATA_ODS_RETENTION_DAYS": "²"}, "STRATA_ODS_RETENTION_DAYS"),
        ({"STRATA_SQL_TIMEOUT_S": "0"}, "STRATA_SQL_TIMEOUT_S"),
        ({"STRATA_SQL_TIMEOUT_S": "nan"}, "STRATA_SQL_TIMEOUT_S"),
        ({"STRATA_SQL_MEMORY_LIMIT": "lots"}, "STRATA_SQL_MEMORY_LIMIT must be a size such as 512MB"),
        ({"STRATA_SQL_SPILL_LIMIT": "0GB"}, "STRATA_SQL_SPILL_LIMIT"),
        ({"STRATA_LAKE_READER_MEMORY": "512"}, "STRATA_LAKE_READER_MEMORY"),
        ({"STRATA_DEFAULT_TENANT": "a tenant; drop"}, "STRATA_DEFAULT_TENANT"),
    ],
)
def test_bad_settings_say_which_variable(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings({"STRATA_HOME": str(tmp_path), **env})


def test_a_table_without_a_contract_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ContractError, match=r"dwd\.request"):
        table("../etc/passwd")


def test_missing_pseudonym_key_is_an_actionable_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="STRATA_PSEUDONYM_KEY"):
        load_settings({"STRATA_HOME": str(tmp_path)}).require_pseudonym_key()


def test_the_registry_reads_layer_partitioning_and_classification_from_the_contracts() -> None:
    names = {t.name for t in all_tables()}
    assert {"ods.request_log_raw", "dwd.request", "dwd.quarantine", "ops.books"} <= names
    assert DWD_REQUEST.layer == "dwd" and DWD_REQUEST.partition_columns == ("event_date",)
    assert [c.name for c in DWD_REQUEST.classified("pseudonymous")] == ["user_pseudonym"]
    assert [c.name for c in ODS_REQUESTS.classified("pii")] == ["raw_line"]


def test_one_setting_moves_the_online_store_to_redis(tmp_path: Path) -> None:
    s = load_settings({"STRATA_HOME": str(tmp_path), "STRATA_ONLINE_STORE": "redis://:pw@10.0.0.5:6380/3"})
    assert (s.online_store, s.redis_url) == ("redis", "redis://:pw@10.0.0.5:6380/3")
    assert "pw" not in s.masked()["STRATA_REDIS_URL"]
    from features.store import online_store_config

    assert online_store_config(s) == {
        "type": "redis",
        "connection_string": "10.0.0.5:6380,db=3,password=${STRATA_FEAST_REDIS_PASSWORD}",
    }
    assert online_store_config(load_settings({"STRATA_HOME": str(tmp_path)}))["path"] == str(
        tmp_path / "feast" / "online_store.db"
    )


#: A value other than the default for every variable the settings read.
_EVERY = {
    "STRATA_LAKE_URI": "s3://bucket/lake",
    "STRATA_LANDING_DIR": "/srv/landing",
    "AIRFLOW_HOME": "/srv/airflow",
    "STRATA_PSEUDONYM_KEY": "a-key-of-sixteen-chars",
    "STRATA_ONLINE_STORE": "redis",
    "STRATA_REDIS_URL": "redis://:pw@10.0.0.5:6380/3",
    "STRATA_ODS_RETENTION_DAYS": "30",
    "STRATA_LOCK_URL": "postgresql://u:pw@db/locks",
    "STRATA_LOCK_WAIT": "2.5",
    "STRATA_TS_FLOOR": "2010-06-01",
    "STRATA_DEFAULT_TENANT": "acme",
    "STRATA_SCORE_SHARDS": "8",
    "STRATA_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
    "STRATA_S3_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "not-a-secret",
    "STRATA_CACHE_DIR": "/srv/cache",
    "STRATA_SQL_TIMEOUT_S": "0.1234567891",
    "STRATA_SQL_MEMORY_LIMIT": "512MiB",
    "STRATA_SQL_SPILL_LIMIT": "1.5GB",
    "STRATA_LAKE_READER_MEMORY": "64MiB",
}


def test_every_variable_is_read_shown_masked_and_travels_to_a_child(tmp_path: Path) -> None:
    s = load_settings({"STRATA_HOME": str(tmp_path), **_EVERY})
    defaults = load_settings({"STRATA_HOME": str(tmp_path)})
    unchanged = [k for k, v in s.masked().items() if v == defaults.masked()[k]]
    assert unchanged == ["STRATA_HOME", "$STRATA_HOME/feast", "$STRATA_HOME/models"]  # the home, and derived
    assert set(s.to_env()) == {"STRATA_HOME", *_EVERY}
    assert load_settings(s.to_env()) == s
    shown = str(s.masked())
    assert not any(secret in shown for secret in ("a-key-of-sixteen", "pw@", "AKIDEXAMPLE", "not-a-secret"))


def test_an_empty_variable_counts_as_unset_where_the_default_is_derived_or_none(tmp_path: Path) -> None:
    empty = dict.fromkeys(["STRATA_LAKE_URI", "STRATA_LANDING_DIR", "STRATA_PSEUDONYM_KEY", "STRATA_CACHE_DIR"], "")
    s = load_settings({"STRATA_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg"), **empty})
    assert (s.lake_uri, s.landing_dir, s.pseudonym_key) == (str(tmp_path / "lake"), tmp_path / "landing", None)
    assert s.cache_dir == tmp_path / "xdg" / "strata"
    with pytest.raises(ConfigError, match="STRATA_SCORE_SHARDS must be a whole number >= 1, not ''"):
        load_settings({"STRATA_HOME": str(tmp_path), "STRATA_SCORE_SHARDS": ""})


def test_the_receiver_settings_check_the_port_and_the_tls_pair() -> None:
    assert load_collect_settings({}).max_body_bytes == 32 << 20
    with pytest.raises(ConfigError, match="STRATA_COLLECT_PORT must be a TCP port"):
        load_collect_settings({"STRATA_COLLECT_PORT": "70000"})
    with pytest.raises(ConfigError, match="go together"):
        load_collect_settings({"STRATA_COLLECT_TLS_CERT": "cert.pem"})


def test_the_docs_tables_are_the_ones_the_declarations_generate() -> None:
    page = DOCS_PAGE.read_text(encoding="utf-8")
    assert page == docs_page(page), "run `python -m warehouse.settings docs`"
    assert "| `STRATA_CACHE_DIR` | `$XDG_CACHE_HOME/strata`" in reference_table(Settings)
    assert "| `STRATA_COLLECT_MAX_BODY_BYTES` | `33554432` (32 MiB) |" in reference_table(CollectSettings)
    assert "feast_dir" not in page  # derived from the home, no variable of its own
    # `strata config` shows each setting by its variable, which the page lists (derived ones by their derivation)
    shown = load_settings({"STRATA_HOME": "/tmp/h"}).masked()
    assert [v for v in shown if f"| `{v}`" not in page] == ["$STRATA_HOME/feast", "$STRATA_HOME/models"]


def test_the_makefile_asks_the_package_for_the_cache_folder(tmp_path: Path) -> None:
    def cache_dir(**env: str) -> str:
        command = [sys.executable, "-m", "warehouse.settings", "cache-dir"]
        return subprocess.run(command, env={"HOME": str(tmp_path), **env}, capture_output=True, text=True).stdout

    assert cache_dir() == f"{tmp_path}/.cache/strata\n"
    assert cache_dir(XDG_CACHE_HOME=str(tmp_path / "xdg")) == f"{tmp_path}/xdg/strata\n"
    assert cache_dir(STRATA_CACHE_DIR=str(tmp_path / "c"), XDG_CACHE_HOME="/elsewhere") == f"{tmp_path}/c\n"
    makefile = (DOCS_PAGE.parents[1] / "Makefile").read_text()
    assert "python -m warehouse.settings cache-dir" in makefile and "XDG_CACHE_HOME" not in makefile
