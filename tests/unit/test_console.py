"""Numbers in the CLI's tables read as a person reads them."""

from __future__ import annotations

import pytest

from strata.console import plain


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (32850.5, "32,850"),  # was 3.285e+04 in the demo's tables
        (1_234_567.0, "1,234,567"),
        (99.456, "99.46"),
        (1.0, "1"),
        (0.9997, "0.9997"),
        (0.25, "0.25"),
        (1.19e-07, "0.000000119"),
        (0.0, "0"),
        (-0.0123, "-0.0123"),
        (float("nan"), "nan"),
    ],
)
def test_a_number_is_plain_digits_never_an_exponent(value: float, shown: str) -> None:
    assert plain(value) == shown
    assert "e" not in plain(value).replace("nan", "")
