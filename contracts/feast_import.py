"""Importing Feast in a second rather than four: without typeguard's import-time instrumentation.

Feast decorates its classes (``Entity``, ``FeatureView``, ``Field``, the data sources, …) with
typeguard's ``@typechecked``, which re-parses and recompiles the decorated class's whole
source module once per method: 2.9 s of the 4.1 s ``import feast`` takes on this machine
(measured), paid by every process that touches Feast — each Airflow task that materializes,
``strata features get``. The checks only guard the types of the arguments Feast's own
constructors receive, which Strata's definitions pass typed (and its tests apply), so Feast
is imported with the decorator as a no-op, as it is under ``python -O``. Only the import is
affected: the decorator is restored afterwards.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

_lock = threading.Lock()


def load_feast() -> ModuleType:
    """The ``feast`` package, imported on first use without typeguard's instrumentation.

    Call it before the first ``import feast`` (or ``from feast… import``) of a code path.
    """
    with _lock:
        if "feast" in sys.modules:
            return sys.modules["feast"]
        import typeguard

        typechecked = typeguard.typechecked
        typeguard.typechecked = _unchecked  # type: ignore[assignment]
        try:
            import feast
        finally:
            typeguard.typechecked = typechecked
        return feast


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``@typechecked`` and ``@typechecked(...)`` as the identity."""
    return target if target is not None else _unchecked
