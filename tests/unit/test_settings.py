"""Settings and the table registry: defaults, overrides and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import ContractError
from warehouse.settings import ConfigError, load_settings
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
    assert "pw" not in s.masked()["redis_url"]
    from features.store import online_store_config

    assert online_store_config(s) == {
        "type": "redis",
        "connection_string": "10.0.0.5:6380,db=3,password=${STRATA_FEAST_REDIS_PASSWORD}",
    }
    assert online_store_config(load_settings({"STRATA_HOME": str(tmp_path)}))["path"] == str(
        tmp_path / "feast" / "online_store.db"
    )
