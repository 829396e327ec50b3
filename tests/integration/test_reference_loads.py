"""Price and quota lists are loaded whole or not at all: a bad row or a missing column changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.errors import InputError
from warehouse.dwd.prices import load_prices
from warehouse.dwd.quotas import load_quotas
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_MODEL_PRICE, DWD_TENANT_QUOTA, Table

PRICE_HEADER = "model,effective_from,input_price_per_1k,output_price_per_1k\n"
QUOTA_HEADER = "tenant_id,effective_from,daily_request_quota,daily_token_quota\n"


def _state(table: Table) -> tuple[int | None, list[dict]]:
    settings = load_settings()
    return Lake(settings).open_table(table).version(), Lake(settings).read_frame(table).to_dicts()  # type: ignore[union-attr]


def test_a_price_list_with_one_bad_row_changes_nothing(tmp_path: Path, strata_env: Path) -> None:
    good = tmp_path / "prices.csv"
    good.write_text(PRICE_HEADER + "".join(f"m{i},2026-01-01,0.001,0.002\n" for i in range(11)))
    load_prices(load_settings(), good)
    before = _state(DWD_MODEL_PRICE)
    bad = tmp_path / "bad.csv"
    bad.write_text(PRICE_HEADER + "m1,2026-01-01,0.001,0.002\nm2,2026-01-01,-5,0.002\n")
    with pytest.raises(InputError, match=r"(?s)1 of 2 price row\(s\).*input_price_per_1k\.min.*nothing loaded.*line 3"):
        load_prices(load_settings(), bad)
    assert _state(DWD_MODEL_PRICE) == before and len(before[1]) == 11


def test_a_price_list_whose_every_row_is_bad_names_each_rule(tmp_path: Path, strata_env: Path) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text(PRICE_HEADER + "m1,2026-13-01,0.001,0.002\nm2,2026-01-01,-5,0.002\nm3,2026-01-01,0.1,\n")
    with pytest.raises(InputError) as refused:
        load_prices(load_settings(), bad)
    message = str(refused.value)
    for line, rule in ((2, "effective_from.type"), (3, "input_price_per_1k.min"), (4, "output_price_per_1k.required")):
        assert f"line {line}: broke {rule}" in message and f"{rule} (1 row)" in message
    assert Lake(load_settings()).open_table(DWD_MODEL_PRICE) is None


def test_a_quota_list_without_its_quota_columns_is_refused(tmp_path: Path, strata_env: Path) -> None:
    good = tmp_path / "quotas.csv"
    good.write_text(QUOTA_HEADER + "t1,2026-01-01,100,5000\n")
    load_quotas(load_settings(), good)
    before = _state(DWD_TENANT_QUOTA)
    bare = tmp_path / "bare.csv"
    bare.write_text("tenant_id,effective_from\nt1,2026-02-01\n")
    with pytest.raises(InputError, match=r"missing quota column\(s\) \['daily_request_quota', 'daily_token_quota'\]"):
        load_quotas(load_settings(), bare)
    assert _state(DWD_TENANT_QUOTA) == before
