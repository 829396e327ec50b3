"""Nothing private above ODS: every producer with content capture on (the official openai-v2, OpenInference and
OpenLLMetry live; OpenLIT's and LiteLLM's committed captures; LiteLLM's logged payloads through its mapping)
through ``strata collect`` (or ingest) → build dwd, dws, ads and
the online store; no prompt, completion, raw user id, email, IP address, key hash, header or error
message is in a column of DWD, DWS or ADS that is not classified ``pii``, nor in the online store, nor
in ``strata sql`` output without ``--raw``; ``strata privacy clean`` cleans a lake built before the
attribute policy. One lake for the module's tests: the live spans are moved two days back before
they are posted, so their day's DWS rows are not in the future."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from collect_server import receiver_thread
from openai_server import serve
from producers import capture_otlp, run_producer
from typer.testing import CliRunner

from features.store import sqlite_path
from strata.cli import app
from warehouse.settings import Settings, load_settings
from warehouse.sql.sandbox import is_raw
from warehouse.storage.lake import Lake
from warehouse.tables import PII, all_tables, table

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
LITELLM, OPENLIT = PRODUCERS / "litellm", PRODUCERS / "openlit"
#: Attribute keys whose values are private in what these producers send (the needles of the scan).
PRIVATE_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.headers",
    "gen_ai.user",
    "gen_ai.request.user",
    "llm.user",
    "input.value",
    "output.value",
    "error.message",
    "error.stack_trace",
    "metadata.user_api_key_user_email",
    "metadata.requester_ip_address",
    "metadata.user_api_key_hash",
    "metadata.user_api_key_user_id",
)
#: What the fake server and the plan put in every run: the answer, the error text, the users.
FIXED = ["hello from the test server", "test error 4", "user-1", "user-2", "user-3", "user-4", "@example.com"]
#: How far back the live spans are moved (whole days: their clock times stay).
BACK_NS = 2 * 86_400 * 10**9


def _cli(settings: Settings, *args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={**settings.to_env(), "COLUMNS": "200"})
    assert result.exit_code == 0, f"strata {' '.join(args)}: {result.output}{result.exception!r}"
    return result.output


def _span_values(line: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for rs in line.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for attr in span.get("attributes", []):
                    value = next(iter(attr.get("value", {}).values()), None)
                    yield attr["key"], value if isinstance(value, str) else json.dumps(value)


def _needles(settings: Settings) -> set[str]:
    """The private values the producers sent, read from ODS's raw lines, plus the plan's fixed ones."""
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert isinstance(ods, pl.DataFrame)
    found = set(FIXED)
    for raw in ods.get_column("raw_line").to_list():
        for key, value in _span_values(json.loads(raw)):
            content = key.startswith(
                ("gen_ai.prompt.", "gen_ai.completion.", "llm.input_messages.", "llm.output_messages.")
            ) and key.endswith(".content")
            if value and (content or key in PRIVATE_KEYS):
                found.add(value[:60])
    return {n for n in found if len(n) >= 6}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("privacy") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STRATA_HOME", str(home))
        for name in ("STRATA_LAKE_URI", "STRATA_LANDING_DIR", "AIRFLOW_HOME"):
            mp.delenv(name, raising=False)
        mp.setenv("STRATA_PSEUDONYM_KEY", "test-key-not-a-secret-0123456789")
        settings = load_settings()
        with serve() as base_url, capture_otlp() as captured:
            for producer in ("openai_v2", "openinference", "openllmetry"):
                run_producer(producer, base_url, f"{captured.url}/v1/traces", "token-1", content_capture=True)
        bodies = [_moved_back(body) for body in captured.bodies()]
        with receiver_thread() as collector:
            captures = [
                path.read_bytes() for folder in (LITELLM, OPENLIT) for path in sorted(folder.glob("traces-*.pb"))
            ]
            for body in [*bodies, *captures]:
                request = urllib.request.Request(
                    f"{collector}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
                )
                with urllib.request.urlopen(request, timeout=30) as response:
                    assert response.status == 200
        _cli(settings, "ingest", str(settings.landing_dir))
        _cli(settings, "ingest", str(LITELLM / "payloads.jsonl"), "--mapping", "litellm", "--tenant", "acme")
        ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
        assert isinstance(ods, pl.DataFrame)
        dates = [str(d) for d in ods.get_column("event_date").drop_nulls().unique().sort().to_list()]
        flags = [arg for d in dates for arg in ("--date", d)]
        _cli(settings, "build", "dwd", *flags)
        _cli(settings, "build", "dws", *flags)
        _cli(settings, "features", "materialize")
        _cli(settings, "build", "ads", *flags)
        yield {"settings": settings, "dates": dates, "needles": _needles(settings)}


def _moved_back(body: bytes) -> bytes:
    """An OTLP export with every span's and event's time :data:`BACK_NS` earlier."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    export = ExportTraceServiceRequest.FromString(body)
    for rs in export.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                span.start_time_unix_nano -= BACK_NS
                span.end_time_unix_nano -= BACK_NS
                for event in span.events:
                    event.time_unix_nano -= BACK_NS
    return export.SerializeToString()


def _online_rows(settings: Settings) -> list[tuple[Any, ...]]:
    """Every row of every table of the SQLite online store (Feast's: key, feature, value, times)."""
    with sqlite3.connect(sqlite_path(settings)) as con:
        names = [n for (n,) in con.execute("select name from sqlite_master where type = 'table'")]
        return sorted(row for name in names for row in con.execute(f'select * from "{name}"'))


def _leaks(text: str, needles: set[str]) -> list[str]:
    return sorted(n for n in needles if n in text)


def test_no_private_value_above_ods(world: dict[str, Any]) -> None:
    settings, needles = world["settings"], world["needles"]
    assert {"hello from the test server", "10.0.0.7", "user-3"} <= needles  # the producers did send them
    dwd = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    assert isinstance(dwd, pl.DataFrame) and dwd.height >= 40
    assert dwd.get_column("attributes").str.contains("otel.span_id").any()  # lineage stays
    leaks = {}
    scanned = 0
    for t in all_tables():
        if t.layer not in ("dwd", "dws", "ads") or Lake(settings).version(t) is None:
            continue
        frame = pl.from_arrow(Lake(settings).read(t))
        assert isinstance(frame, pl.DataFrame)
        for column in t.contract.columns:
            if column.classification == PII or column.name not in frame.columns:
                continue
            text = "\n".join(str(v) for v in frame.get_column(column.name).to_list())
            if found := _leaks(text, needles):
                leaks[f"{t.name}.{column.name}"] = found
        scanned += 1
    online = _online_rows(settings)
    text = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for r in online for v in r)
    if found := _leaks(text, needles):
        leaks["online store"] = found
    layers = {t.layer for t in all_tables() if Lake(settings).version(t) is not None}
    assert {"dwd", "dws", "ads"} <= layers and scanned >= 8 and len(online) > 100 and not leaks, leaks


def test_strata_sql_without_raw_shows_no_private_value(world: dict[str, Any]) -> None:
    settings, needles = world["settings"], world["needles"]
    leaks, read = {}, 0
    for t in all_tables():
        if is_raw(t) or Lake(settings).version(t) is None:
            continue
        output = _cli(settings, "sql", f"select * from {t.name}", "-f", "csv")
        if found := _leaks(output, needles):
            leaks[t.name] = found
        read += 1
    assert read >= 3 and not leaks, leaks


def test_forget_finds_a_user_by_every_dialects_keys(tmp_path: Path, strata_env: Path) -> None:
    """LiteLLM names its user ``llm.user`` on the call and ``llm.openai.user`` on its child span: after
    ``strata forget`` no line of ODS or the landing zone holds the id."""
    settings = load_settings()
    landing = tmp_path / "exports"
    landing.mkdir()
    (landing / "litellm.otlp.jsonl").write_bytes((LITELLM / "traces-001.json").read_bytes())
    _cli(settings, "ingest", str(landing), "--tenant", "acme")
    assert b"user-3" in b"".join(_raw_lines(settings))
    _cli(settings, "forget", "--user", "user-3")
    held = [line for line in _raw_lines(settings) if b'"user-3"' in line]
    assert not held and b'"user-1"' in b"".join(_raw_lines(settings))  # only that user left


def _raw_lines(settings: Settings) -> list[bytes]:
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    assert isinstance(ods, pl.DataFrame)
    return ods.get_column("raw_line").to_list()


def _layer_rows(settings: Settings, layer: str) -> dict[str, tuple[int | None, pl.DataFrame]]:
    """Each table of ``layer`` in the lake: its version and its rows (sorted, build times left out)."""
    rows = {}
    for t in all_tables():
        if t.layer == layer and (version := Lake(settings).version(t)) is not None:
            frame = pl.from_arrow(Lake(settings).read(t))
            assert isinstance(frame, pl.DataFrame)
            frame = frame.drop([c for c in frame.columns if c.endswith("_at")])
            rows[t.name] = (version, frame.sort(frame.columns))
    return rows


def test_privacy_clean_rebuilds_a_lake_built_before_the_policy(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DWD built as before the attribute policy (its attributes passed whole) holds the prompts, and an
    ``--as-of`` read of that version shows them; after ``strata privacy clean`` neither the current
    version nor that one does, and DWS, ADS and the online store were rebuilt with the same rows."""
    settings, needles = world["settings"], world["needles"]
    flags = [arg for d in world["dates"] for arg in ("--date", d)]
    request = table("dwd.request")
    with monkeypatch.context() as mp:  # the DWD build as it was before the policy: attributes kept whole
        mp.setattr("warehouse.dwd.transform.without_private", lambda frame, contract: frame)
        _cli(settings, "build", "dwd", *flags)
    old = Lake(settings).version(request)
    query = ["sql", "select attributes from dwd.request", "-f", "csv"]
    held = _cli(settings, *query, "--as-of", f"dwd.request={old}")
    assert "gen_ai.input.messages" in held and "hello from the test server" in _leaks(held, needles)
    dws, ads, online = _layer_rows(settings, "dws"), _layer_rows(settings, "ads"), _online_rows(settings)
    days = _layer_rows(settings, "dwd")["dwd.request"][1].get_column("event_date").n_unique()

    output = _cli(settings, "privacy", "clean")

    assert f"DWD: {days} date(s) rebuilt" in output, output
    current = _cli(settings, *query)
    assert "otel.span_id" in current and "gen_ai.input.messages" not in current and not _leaks(current, needles)
    pinned = CliRunner().invoke(
        app, [*query, "--as-of", f"dwd.request={old}"], env={**settings.to_env(), "COLUMNS": "200"}
    )
    # The old version's files and log entries are vacuumed: it cannot be read, and nothing of it is shown.
    assert pinned.exit_code != 0 and not _leaks(pinned.output, needles), pinned.output
    for before, after in ((dws, _layer_rows(settings, "dws")), (ads, _layer_rows(settings, "ads"))):
        rebuilt = [name for name in before if after[name][0] != before[name][0]]
        # (ads.data_quality reports the builds themselves: their attempts and versions grew.)
        changed = [n for n in before if n != "ads.data_quality" and not after[n][1].equals(before[n][1])]
        assert rebuilt and not changed, (rebuilt, changed)
    assert "online store: 0 value(s)" not in output
    assert [r[:4] for r in _online_rows(settings)] == [r[:4] for r in online]
