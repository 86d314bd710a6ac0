"""The small model both programs of this case run: y = x @ w1 + x @ w2.

Its two MatMul branches are independent, so a session in ORT_PARALLEL execution mode runs
them as separate tasks on its inter-op thread pool.
"""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

WIDTH = 256


def model_bytes() -> bytes:
    """Serialize the two-branch model (opset 17, IR 8: what onnxruntime 1.30 loads)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.random((WIDTH, WIDTH), dtype=np.float32), name)
        for name in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("MatMul", ["x", "w2"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, WIDTH])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def parallel_session(model: bytes) -> ort.InferenceSession:
    """A CPU session whose graph runs on an inter-op pool of 2 threads (ORT_PARALLEL)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 2
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def inputs() -> dict[str, np.ndarray]:
    """One batch of input rows."""
    return {"x": np.random.default_rng(1).random((512, WIDTH), dtype=np.float32)}
