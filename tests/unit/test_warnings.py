"""The suite's warning policy (``filterwarnings`` in pyproject.toml): a deprecation raised from our own
code fails the test, the third-party ones we cannot fix are named, and no other one is hidden."""

from __future__ import annotations

import warnings

import pytest


def _warn_from(module: str, message: str, category: type[Warning] = DeprecationWarning) -> list[str]:
    """Warn as if from code of ``module`` (a call to a deprecated API there); the messages shown."""
    with warnings.catch_warnings(record=True) as seen:  # keeps the filters pytest set for this test
        warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module=module, registry={})
    return [str(w.message) for w in seen]


@pytest.mark.parametrize("module", ["warehouse.storage.lake", "strata.cli", "contracts", "dags.strata_daily"])
@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning])
def test_a_deprecated_call_in_our_code_fails_the_test(module: str, category: type[Warning]) -> None:
    with pytest.raises(category, match="old API"):
        _warn_from(module, "old API", category)


def test_a_named_third_party_deprecation_is_ignored() -> None:
    message = "fetch_arrow_table() is deprecated, use to_arrow_table() instead."
    assert _warn_from("ibis.backends.duckdb", message) == []


def test_any_other_deprecation_is_shown_not_hidden() -> None:
    """Another library's deprecation shows in the summary (it is not ours to fix, nor to hide)."""
    assert _warn_from("feast.infra.offline_stores.duckdb", "old API") == ["old API"]
    assert _warn_from("warehousekeeper", "old API") == ["old API"]  # a prefix of ours is not ours
