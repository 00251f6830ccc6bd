"""Where the ONNX backend node tests are.

The node tests of default-domain opsets up to 21 are the data onnx 1.16.2's wheel ships
(onnx/backend/test/data/node): later wheels ship none. tools/install_deps.sh unpacks that
folder from the 1.16.2 wheel into NODE_DATA_1_16 without installing the package; the
suite's onnx is the current release, whose own case generators write the node tests of
opsets 22 to 28 (tools/gen_node_tests.py, tests/cpu/node_tests_22_28.py)."""
import os

NODE_DATA_1_16 = "/opt/onnx-node-tests-1.16.2"


def node_data_dir():
    """$PIPECC_ONNX_NODE_DATA, else the installed onnx's own folder where it ships one, else
    NODE_DATA_1_16."""
    d = os.environ.get("PIPECC_ONNX_NODE_DATA")
    if d:
        return d
    import onnx
    own = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(own) and os.listdir(own):
        return own
    return NODE_DATA_1_16
