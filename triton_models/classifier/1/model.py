"""Classifier: a torch network on PIXELS (normalised CHW float32), on the GPU when the instance has one.

Weights, in this order:
* parameter ``checkpoint`` (``s3://bucket/key`` or ``ignite://CACHE/name``): a checkpoint that
  `workbench.model_serving.save_classifier` wrote after training. It names its architecture (the
  training pipelines' `build_classifier`: small, tiny or a torchvision model) and class count, which
  then replace the arch/num_classes parameters (a bare state dict, as `pipelines.train_torch
  --checkpoint-url` writes, is one of those parameters' network). It is read with the workbench's
  checkpoint readers and the credentials the stack exported to Triton's environment
  (`workbench.stack.triton`). A checkpoint that cannot be read fails the load, with the reason in
  Triton's log and model status.
* ``1/weights.pt`` (a state_dict of the ``arch`` parameter's network) when present;
* otherwise torchvision's ``arch`` with ``weights=None`` from a fixed seed, so every server computes the
  same function and results are reproducible across protocols and runs (nothing can be downloaded here).

The input side comes from config.pbtxt's PIXELS dims (224 in the shared repository).
Tensors cross the stub with DLPack only (the stub's pybind11 misreads NumPy 2 dtypes: see
../preprocess/config.pbtxt).
"""

from __future__ import annotations

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from workbench.triton_python import param


def _input_side(config: dict) -> int:
    for tensor in config.get("input", []):
        if tensor.get("name") == "PIXELS":
            return int(tensor.get("dims", [3, 224, 224])[-1])
    return 224


class TritonPythonModel:
    def initialize(self, args):
        import torch

        config = json.loads(args["model_config"])
        arch = param(config, "arch", "resnet18")
        num_classes = int(param(config, "num_classes", "1000"))
        seed = int(param(config, "seed", "0"))
        threads = int(param(config, "num_threads", "0"))
        checkpoint = param(config, "checkpoint", "")
        if threads > 0:
            torch.set_num_threads(threads)
        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            self.device = torch.device(f"cuda:{int(args.get('model_instance_device_id', 0) or 0)}")
        else:
            self.device = torch.device("cpu")
        self.side = _input_side(config)
        if checkpoint:
            model, arch, num_classes, source = self._from_checkpoint(checkpoint, arch, num_classes)
        else:
            model, source = self._from_seed_or_file(args, arch, num_classes, seed)
        self.model = model.eval().to(self.device)
        self.torch = torch
        with torch.inference_mode():  # first call initialises kernels: not in a request
            self.model(torch.zeros(1, 3, self.side, self.side, device=self.device))
        pb_utils.Logger.log_info(f"classifier: {arch} ({num_classes} classes, {self.side} px, weights from "
                                 f"{source}) on {self.device}")

    @staticmethod
    def _from_checkpoint(uri: str, arch: str, num_classes: int):
        """The checkpoint's network; a bare state dict is one of the arch/num_classes parameters' network."""
        from workbench.config import Settings
        from workbench.errors import WorkbenchError
        from workbench.model_serving import build_model, load_classifier

        try:
            saved = load_classifier(uri, Settings())
            arch, num_classes = saved.get("arch", arch), int(saved.get("num_classes", num_classes))
            model = build_model(arch, num_classes)
            model.load_state_dict(saved["state_dict"])
        except (WorkbenchError, RuntimeError, KeyError) as exc:  # unreadable, or weights of another network
            raise pb_utils.TritonModelException(f"classifier: cannot load checkpoint {uri}: {exc}") from exc
        return model, arch, num_classes, uri

    @staticmethod
    def _from_seed_or_file(args, arch: str, num_classes: int, seed: int):
        import torch
        import torchvision

        builder = getattr(torchvision.models, arch, None)
        if builder is None or not callable(builder):
            raise pb_utils.TritonModelException(f"classifier: torchvision has no model '{arch}' (parameter arch)")
        torch.manual_seed(seed)
        model = builder(weights=None, num_classes=num_classes)
        weights = Path(args["model_repository"]) / args["model_version"] / "weights.pt"
        if weights.is_file():
            model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            return model, weights.name
        return model, f"seed {seed}"

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
