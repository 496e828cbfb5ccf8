"""Echo: returns each input blob unchanged and its length. Used by health checks and transport tests."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            blobs = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            sizes = np.array([[len(b[0])] for b in blobs], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT", blobs.astype(np.object_)),
                        pb_utils.Tensor("NBYTES", sizes),
                    ]
                )
            )
        return responses
