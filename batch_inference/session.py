"""ONNX Runtime sessions: the provider chosen honestly, a warm-up run, IO binding.

``auto`` tries CUDA, then the CPU. ``cuda`` insists: onnxruntime-gpu lists CUDA as
available on a machine without a GPU and then silently runs on the CPU, so the provider
the session really uses is read back and a CUDA request that ended on the CPU is refused.
Every batch runs through IO binding (inputs bound from host memory, outputs copied back),
the path that keeps a GPU busy; on the CPU it costs nothing and is the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np

from batch_inference.registry import ModelError

Provider: TypeAlias = Literal["auto", "cuda", "cpu"]
_CUDA, _CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
_WANTED: dict[str, list[str]] = {"auto": [_CUDA, _CPU], "cuda": [_CUDA, _CPU], "cpu": [_CPU]}


@dataclass
class Session:
    """One loaded model: run a float32 matrix, get the positive class's probability per row."""

    session: Any
    provider: str
    input_name: str
    output_name: str
    n_features: int

    def warm_up(self) -> None:
        """One small run first, so the first real batch does not pay for allocations (or CUDA's start)."""
        self.run(np.zeros((8, self.n_features), dtype=np.float32))

    def run(self, rows: np.ndarray) -> np.ndarray:
        """Scores of ``rows`` (n × features, float32): the probability of class 1."""
        binding = self.session.io_binding()
        binding.bind_cpu_input(self.input_name, np.ascontiguousarray(rows, dtype=np.float32))
        binding.bind_output(self.output_name, "cuda" if self.provider == _CUDA else "cpu")
        self.session.run_with_iobinding(binding)
        probabilities: np.ndarray = binding.copy_outputs_to_cpu()[0]
        return probabilities[:, 1] if probabilities.ndim == 2 else probabilities

    def run_plain(self, rows: np.ndarray) -> np.ndarray:
        """The same scores through ``InferenceSession.run`` (no binding): the reference."""
        probabilities: np.ndarray = self.session.run([self.output_name], {self.input_name: rows.astype(np.float32)})[0]
        return probabilities[:, 1] if probabilities.ndim == 2 else probabilities


def open_session(model: bytes, provider: Provider = "auto", *, threads: int | None = None) -> Session:
    """A session on the best provider ``provider`` allows; refuses a corrupt model and a CUDA
    request that would run on the CPU."""
    import onnxruntime as ort

    # Under ``auto`` a CUDA library that will not load is the expected fallback (the session's provider
    # says where it ran), not an error line; under ``cuda`` ORT names the missing library before we refuse.
    ort.set_default_logger_severity(3 if provider == "cuda" else 4)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # CUDA's "not available, falling back" goes through our own message
    if threads:
        options.intra_op_num_threads = threads
    available = ort.get_available_providers()
    try:
        session = ort.InferenceSession(model, options, providers=[p for p in _WANTED[provider] if p in available])
    except Exception as exc:  # ORT raises several types for a file that is not a model
        raise ModelError(
            f"model.onnx cannot be loaded by ONNX Runtime (corrupt or not an ONNX model): "
            f"{str(exc).splitlines()[0][:300]}"
        ) from None
    used = session.get_providers()[0]
    if provider == "cuda" and used != _CUDA:
        raise ModelError(
            "provider cuda was asked, but ONNX Runtime runs this session on "
            f"{used} (no usable CUDA device or libraries here); use provider auto or cpu",
            argument="provider",
        )
    inputs, outputs = session.get_inputs(), session.get_outputs()
    probabilities = next((o for o in outputs if "prob" in o.name), outputs[-1])
    return Session(session, used, inputs[0].name, probabilities.name, int(inputs[0].shape[1]))
