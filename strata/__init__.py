"""Strata: the CLI and configuration of the Strata data layer.

Importing the package sets :data:`PROCESS_ENV` where the environment does not say otherwise, so
every Strata process — the CLI, the Celery worker before it forks its tasks, the Airflow
processes :func:`strata.orchestration.env.airflow_env` configures — has it before a library
reads it.
"""

import os

__version__ = "0.1.0"

#: Environment defaults of every Strata process. ONNX Runtime writes telemetry events (full
#: command lines) into ``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` when it is imported,
#: and carries an uploader; only this variable, set before the import, stops both
#: (``disable_telemetry_events()`` after it does not; measured with onnxruntime 1.31).
PROCESS_ENV = {"ORT_DISABLE_TELEMETRY": "1"}

for _name, _value in PROCESS_ENV.items():
    os.environ.setdefault(_name, _value)
