"""Classifier: a torchvision network on PIXELS (normalised CHW float32), on the GPU when the instance has one.

Weights: `1/weights.pt` (a state_dict) when present; otherwise the network is initialised with
`weights=None` from a fixed seed, so every server computes the same function and results are
reproducible across protocols and runs (no weights can be downloaded on these machines).

Tensors cross the stub with DLPack only (the stub's pybind11 misreads NumPy 2 dtypes: see
../preprocess/config.pbtxt).
"""

from __future__ import annotations

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils


def _param(config: dict, key: str, default: str) -> str:
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return value if value not in ("", None) else default


class TritonPythonModel:
    def initialize(self, args):
        import torch
        import torchvision

        config = json.loads(args["model_config"])
        arch = _param(config, "arch", "resnet18")
        num_classes = int(_param(config, "num_classes", "1000"))
        seed = int(_param(config, "seed", "0"))
        threads = int(_param(config, "num_threads", "0"))
        if threads > 0:
            torch.set_num_threads(threads)
        builder = getattr(torchvision.models, arch, None)
        if builder is None or not callable(builder):
            raise pb_utils.TritonModelException(f"classifier: torchvision has no model '{arch}' (parameter arch)")
        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            self.device = torch.device(f"cuda:{int(args.get('model_instance_device_id', 0) or 0)}")
        else:
            self.device = torch.device("cpu")
        torch.manual_seed(seed)
        model = builder(weights=None, num_classes=num_classes)
        weights = Path(args["model_repository"]) / args["model_version"] / "weights.pt"
        source = f"seed {seed}"
        if weights.is_file():
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            source = str(weights.name)
        self.model = model.eval().to(self.device)
        self.torch = torch
        with torch.inference_mode():  # first call initialises kernels: not in a request
            self.model(torch.zeros(1, 3, 224, 224, device=self.device))
        pb_utils.Logger.log_info(f"classifier: {arch} ({num_classes} classes, weights from {source}) on {self.device}")

    def execute(self, requests):
        torch = self.torch
        tensors = [torch.from_dlpack(pb_utils.get_input_tensor_by_name(r, "PIXELS")) for r in requests]
        sizes = [len(t) for t in tensors]
        batch = (torch.cat(tensors) if len(tensors) > 1 else tensors[0]).to(self.device)
        with torch.inference_mode():
            logits = self.model(batch).float().cpu()
        classes = logits.argmax(dim=1).to(torch.int64).reshape(-1, 1)
        responses, at = [], 0
        for size in sizes:
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor.from_dlpack("LOGITS", logits[at:at + size].contiguous()),
                pb_utils.Tensor.from_dlpack("CLASS", classes[at:at + size].contiguous()),
            ]))
            at += size
        return responses

    def finalize(self):
        self.model = None
