"""Importing Feast in a second rather than four: without typeguard's import-time instrumentation.

Feast decorates its classes (``Entity``, ``FeatureView``, ``Field``, the data sources, …) with
typeguard's ``@typechecked``, which re-parses and recompiles the decorated class's whole
source module once per method: 2.9 s of the 4.1 s ``import feast`` takes on this machine
(measured), paid by every process that touches Feast — each Airflow task that materializes,
``strata features get``. The checks only guard the types of the arguments Feast's own
constructors receive, which Strata's definitions pass typed (and its tests apply), so Feast
is imported with the decorator as a no-op, as it is under ``python -O``. Only the import is
affected: the decorator is restored afterwards.

Feast's import also switches ``prometheus_client`` to multiprocess mode for its feature-server
metrics: it makes a ``/tmp/feast_metrics_*`` folder (three 64 KiB files) that only an orderly
exit removes, so every killed Feast process left one behind. Strata never turns those metrics
on, so the metrics stay in process memory and no folder is made; a ``PROMETHEUS_MULTIPROC_DIR``
set by the user is left to Feast as it is.
"""

from __future__ import annotations

import os
import sys
import threading
from types import ModuleType
from typing import Any, cast

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
        typeguard.typechecked = _unchecked
        placeholders = _in_process_metrics()
        try:
            import feast
        finally:
            typeguard.typechecked = typechecked
            for name in placeholders:
                os.environ.pop(name, None)
        return cast(ModuleType, feast)


_METRICS_DIRS = ("PROMETHEUS_MULTIPROCESS_DIR", "PROMETHEUS_MULTIPROC_DIR")


def _in_process_metrics() -> list[str]:
    """Keep Feast's import from making a metrics folder; the variables set meanwhile, to unset after.

    ``prometheus_client`` picks in-process or file-backed values when it is first imported (from
    the variable); imported here without it, it keeps values in memory. Feast makes its temporary
    folder only when the variable is unset, so it is set, to nothing usable, for the import alone.
    """
    if any(name in os.environ for name in _METRICS_DIRS):
        return []
    import prometheus_client  # noqa: F401  (decides in-process values now)

    for name in _METRICS_DIRS:
        os.environ[name] = os.devnull
    return list(_METRICS_DIRS)


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``@typechecked`` and ``@typechecked(...)`` as the identity."""
    return target if target is not None else _unchecked
