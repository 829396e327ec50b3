"""Strata's processes keep third parties' telemetry off: nothing of it lands outside STRATA_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: A Strata process that scores: the CLI's modules loaded, then an ONNX Runtime session run.
_SCORING = """
import strata.cli
import numpy as np
import onnxruntime
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])
graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
session.run(None, {"x": np.zeros((1, 2), np.float32)})
"""


def test_onnxruntime_leaves_no_telemetry_in_the_home_of_a_strata_process(tmp_path: Path) -> None:
    from strata.orchestration.env import airflow_env
    from warehouse.settings import load_settings

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"} | {"HOME": str(home)}
    subprocess.run([sys.executable, "-c", _SCORING], env=env, check=True, cwd=Path(__file__).parents[2])
    assert not list(home.rglob("*")), "ONNX Runtime wrote its telemetry under HOME"
    settings = load_settings({"STRATA_HOME": str(tmp_path / "strata")})
    assert airflow_env(settings)["ORT_DISABLE_TELEMETRY"] == "1"  # scheduler, workers, tasks
