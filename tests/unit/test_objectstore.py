"""Where the lake lives: the S3 settings, and the one place each client's options come from."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from warehouse.settings import ConfigError, load_settings
from warehouse.storage.objectstore import filesystem, is_object_store, storage_options

S3 = {
    "STRATA_LAKE_URI": "s3://bucket/lake",
    "STRATA_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
    "STRATA_S3_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "not-a-secret",
}


def test_a_local_lake_needs_no_options(tmp_path: Path) -> None:
    settings = load_settings({"STRATA_HOME": str(tmp_path)})
    assert storage_options(settings) is None and not is_object_store(settings.lake_uri)
    fs, path = filesystem(settings, settings.lake_uri)
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "lake")


def test_an_s3_lake_gets_the_same_endpoint_region_and_keys_in_every_client(tmp_path: Path) -> None:
    settings = load_settings({"STRATA_HOME": str(tmp_path), **S3})
    assert storage_options(settings) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "not-a-secret",
    }
    fs, path = filesystem(settings, "s3://bucket/lake/ods/request_log_raw/part-0.parquet")
    assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/lake/ods/request_log_raw/part-0.parquet"
    assert fs.region == "eu-west-1"


def test_s3_settings_are_masked_validated_and_travel_to_a_child(tmp_path: Path) -> None:
    settings = load_settings({"STRATA_HOME": str(tmp_path), **S3, "STRATA_SCORE_SHARDS": "4"})
    shown = settings.masked()
    assert shown["AWS_SECRET_ACCESS_KEY"] == "****" and shown["AWS_ACCESS_KEY_ID"] == "****"
    assert "not-a-secret" not in str(shown)
    assert load_settings(settings.to_env()) == settings  # a child process gets the same settings back
    assert settings.score_shards == 4
    with pytest.raises(ConfigError, match="STRATA_S3_ENDPOINT_URL"):
        load_settings({"STRATA_HOME": str(tmp_path), "STRATA_S3_ENDPOINT_URL": "127.0.0.1:9000"})
    with pytest.raises(ConfigError, match="STRATA_SCORE_SHARDS"):
        load_settings({"STRATA_HOME": str(tmp_path), "STRATA_SCORE_SHARDS": "0"})
