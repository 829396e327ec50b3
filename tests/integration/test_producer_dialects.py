"""What each real producer sends lands whole in ``dwd.request``: OpenInference and OpenLLMetry live (the
``openai`` client they instrument, against the fake OpenAI server), OpenLIT and LiteLLM from their
committed captures (``tests/data/producers``), every export posted as OTLP/HTTP protobuf with a bearer
token to ``strata collect``, then ingested and built; each row equals the call the client saw."""

from __future__ import annotations

import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from collect_server import receiver_thread
from integration.test_collect import _post
from openai_server import serve
from producers import run_producer

from warehouse.dwd.build import build_day
from warehouse.ods.ingest import ingest
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.sources.otlp import ERROR_CLASSES
from warehouse.storage.lake import Lake
from warehouse.tables import table

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "producers"
LIVE, CAPTURED = ("openinference", "openllmetry"), ("openlit", "litellm")
KEY = "test-key-not-a-secret-0123456789"
#: Producers that fill a stream's tokens with their own tokenizer's estimate when the server sent none.
ESTIMATES = {"openlit", "litellm"}
#: Producers whose TTFT of a stream lands (OpenLLMetry sends it as a metric only, LiteLLM not at all).
TTFT = {"openinference", "openlit"}


def _token(producer: str) -> str:
    return f"token-of-{producer}-0123456789"


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict], pl.DataFrame, int]]:
    """Per producer: what the client saw, its ``dwd.request`` rows and how many records the build set aside
    (a lake each: the captures were made against fake servers whose response ids start over)."""
    root = tmp_path_factory.mktemp("producers")
    tokens = root / "tokens"
    tokens.write_text("".join(f"{_token(p)} tenant-{p}\n" for p in (*LIVE, *CAPTURED)))
    tokens.chmod(0o600)
    homes = {p: root / p for p in (*LIVE, *CAPTURED)}
    truth: dict[str, list[dict]] = {}
    with pytest.MonkeyPatch.context() as env, contextlib.ExitStack() as stack:
        env.delenv("STRATA_LAKE_URI", raising=False)
        env.delenv("STRATA_LANDING_DIR", raising=False)
        env.setenv("STRATA_PSEUDONYM_KEY", KEY)
        env.setenv("STRATA_COLLECT_TOKENS_FILE", str(tokens))
        urls = {}
        for producer, home in homes.items():
            env.setenv("STRATA_HOME", str(home))
            urls[producer] = stack.enter_context(receiver_thread())
        base_url = stack.enter_context(serve())
        with ThreadPoolExecutor(len(LIVE)) as pool:
            runs = {
                p: pool.submit(run_producer, p, base_url, f"{urls[p]}/v1/traces", _token(p), service=p) for p in LIVE
            }
            for producer in CAPTURED:
                for body in sorted((CAPTURES / producer).glob("traces-*.pb")):
                    status, _, answer = _post(
                        urls[producer],
                        body.read_bytes(),
                        "application/x-protobuf",
                        Authorization=f"Bearer {_token(producer)}",
                    )
                    assert (status, answer) == (200, b"")
                truth[producer] = _json(CAPTURES / producer / "truth.json")
            truth |= {p: run.result() for p, run in runs.items()}
        stack.close()  # the receivers land their open segments
        rows = {}
        for producer, home in homes.items():
            env.setenv("STRATA_HOME", str(home))
            settings = load_settings()
            report = ingest(settings, [settings.landing_dir])
            set_aside = 0
            for day in report.dates:
                books = build_day(Lake(settings), day)["requests"].books
                set_aside += books.quarantined + books.malformed
            frame = pl.from_arrow(Lake(settings).read(table("dwd.request")))
            assert isinstance(frame, pl.DataFrame)
            rows[producer] = (truth[producer], frame.sort("ts"), set_aside)
    return rows


def _json(path: Path) -> list[dict]:
    return json.loads(path.read_text())


@pytest.mark.parametrize("producer", (*LIVE, *CAPTURED))
def test_every_call_of_a_producer_lands_once_as_the_client_saw_it(
    producer: str, landed: dict[str, tuple[list[dict], pl.DataFrame, int]]
) -> None:
    truth, dwd, set_aside = landed[producer]
    assert (dwd.height, set_aside) == (len(truth), 0) and len(truth) == 20
    key = KEY.encode()
    for call, row in zip(truth, dwd.iter_rows(named=True), strict=True):
        where = f"{producer} call {call['index']}"
        assert row["tenant_id"] == f"tenant-{producer}", where  # the token's, whatever the spans say
        assert (row["operation"], row["model"], row["status_code"]) == (
            call["operation"],
            call["model"],
            call["status"],
        ), where
        assert row["error_type"] == (None if call["error_type"] is None else ERROR_CLASSES[call["error_type"]][1])
        streamed_ok = call["stream"] and call["status"] == 200
        for field, seen in (("input_tokens", call["input_tokens"]), ("output_tokens", call["output_tokens"])):
            if not (seen is None and streamed_ok and producer in ESTIMATES):
                assert row[field] == seen, (where, field)
        assert (row["cached_input_tokens"] or 0) == (call["cached_tokens"] or 0), where  # 0 written as "none"
        user_sent = call["user"] is not None and not (producer == "openlit" and call["status"] != 200)
        assert row["user_pseudonym"] == (pseudonym(key, call["user"]) if user_sent else None), where
        assert (row["ttft_ms"] is not None) == (producer in TTFT and streamed_ok), where
