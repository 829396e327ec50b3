"""scikit-learn pipeline → ONNX, and the parity check that must hold before a model is registered."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

#: Largest difference allowed between ONNX Runtime's and scikit-learn's scores on held-out rows.
PARITY_TOLERANCE = 1e-5


def to_onnx(pipeline: Any, n_features: int) -> bytes:
    """The fitted pipeline as an ONNX model taking ``features`` (n × ``n_features`` float32) and
    giving ``probabilities`` (a tensor, not a list of maps, so batches stay arrays)."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    classifier = pipeline.steps[-1][1]
    model = convert_sklearn(
        pipeline,
        initial_types=[("features", FloatTensorType([None, n_features]))],
        options={id(classifier): {"zipmap": False}},
    )
    return cast(bytes, model.SerializeToString())


def parity(pipeline: Any, model: bytes, rows: np.ndarray) -> float:
    """The largest absolute difference between the two scorings of ``rows``."""
    from batch_inference.session import open_session

    session = open_session(model, "cpu")
    ours = session.run(rows.astype(np.float32))
    theirs = pipeline.predict_proba(rows.astype(np.float32))[:, 1]
    return float(np.max(np.abs(ours - theirs))) if len(rows) else 0.0
