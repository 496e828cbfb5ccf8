"""Preprocess: a DALI pipeline in a python-backend model (decode, resize, centre crop, normalise, CHW float32).

The graph is training's (`workbench.preprocessing.dali_decode_resize_crop`, the one definition of the
resize rule and the ImageNet mean/std): `fn.decoders.image` on the GPU ("mixed", nvJPEG) when this
instance runs on a GPU, on the CPU (`device_id=None`) otherwise; then the shorter side is resized
(parameter resize_shorter; default the DALI training rule, 256 for 224) and the centre S x S is cropped
and normalised. S is the side of the PIXELS output in config.pbtxt (224 in the shared repository; a
repository written for a checkpoint, `workbench.model_serving`, sets its model's size there).

Every request of a dynamic batch is decoded in one pipeline run. A blob DALI cannot decode fails only
its own request: the batch is then re-run request by request (a failed DALI pipeline is rebuilt first).

Inputs cross the stub with DLPack (`np.from_dlpack`), outputs through `tensor` (DLPack with NumPy 2,
the plain API with NumPy 1; `workbench.triton_python`): the stub's pybind11 misreads NumPy 2 dtypes (see
config.pbtxt). No torch here: importing it would cost ~550 MB and ~3 s per model instance.
"""

from __future__ import annotations

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from workbench.preprocessing import SERVING_SIZE, dali_decode_resize_crop, resize_shorter
from workbench.triton_python import error, input_array, param, quiet_numpy_dlpack_deleter, tensor


def _pixels_size(config: dict) -> int:
    """The crop side: the last dim of the PIXELS output (the classifier's input), so the two cannot differ."""
    for output in config.get("output", []):
        if output.get("name") == "PIXELS":
            dims = [int(d) for d in output.get("dims", [])]
            if len(dims) == 3 and dims[0] == 3 and dims[1] == dims[2] and dims[1] > 0:
                return dims[1]
            raise pb_utils.TritonModelException(f"preprocess: PIXELS dims must be [3, S, S], got {dims}")
    return SERVING_SIZE


def _gpu_count() -> int:
    try:
        from nvidia.dali.backend import GetCUDADeviceCount

        return GetCUDADeviceCount()
    except Exception:
        return 0


def _warmup_jpeg() -> bytes | None:
    try:
        import io

        from PIL import Image
    except ImportError:
        return None
    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (128, 96, 64)).save(buffer, format="JPEG")
    return buffer.getvalue()


def _dali_reason(exc: Exception) -> str:
    """The informative lines of a DALI error (it wraps the cause in pipeline boilerplate and a traceback)."""
    text = str(exc)
    cause = text.split("encountered:", 1)[1] if "encountered:" in text else text
    lines = [line.strip() for line in cause.splitlines() if line.strip() and not line.strip().startswith(
        ("Critical error in pipeline", "Current pipeline object is no longer valid", "File ", "which was used"))]
    operator = next((line for line in text.splitlines() if line.startswith("Error in ")), "")
    reason = "; ".join(lines)[:300] or type(exc).__name__
    return f"{reason} ({operator.rstrip(',')})" if operator else reason


class TritonPythonModel:
    def initialize(self, args):
        quiet_numpy_dlpack_deleter()
        config = json.loads(args["model_config"])
        self.max_batch = max(1, int(config.get("max_batch_size", 64)))
        device = param(config, "device", "auto").lower()
        if device not in ("auto", "cpu", "gpu"):
            raise pb_utils.TritonModelException(f"preprocess: parameter device must be auto, cpu or gpu: {device!r}")
        on_gpu_instance = args.get("model_instance_kind", "CPU") == "GPU"
        gpus = _gpu_count()
        if device == "gpu" and gpus == 0:
            raise pb_utils.TritonModelException("preprocess: device=gpu but DALI sees no CUDA device")
        self.gpu = gpus > 0 and (device == "gpu" or (device == "auto" and on_gpu_instance))
        self.device_id = int(args.get("model_instance_device_id", 0) or 0) if self.gpu else None
        threads = int(param(config, "num_threads", "0"))
        self.num_threads = threads if threads > 0 else max(1, min(4, os.cpu_count() or 1))
        self.size = _pixels_size(config)
        self.resize_shorter = int(param(config, "resize_shorter", str(resize_shorter(self.size, "dali"))))
        self.pipe = self._build()
        warmup = _warmup_jpeg()
        if warmup is not None:  # the first run allocates: better here than in the first request
            self._run([np.frombuffer(warmup, dtype=np.uint8)])
        pb_utils.Logger.log_info(
            f"preprocess: DALI decoder={'mixed' if self.gpu else 'cpu'} device_id={self.device_id} "
            f"threads={self.num_threads} max_batch={self.max_batch} size={self.size} "
            f"resize_shorter={self.resize_shorter}"
        )

    def _build(self):
        from nvidia.dali import fn, pipeline_def, types

        gpu, size, shorter = self.gpu, self.size, self.resize_shorter

        @pipeline_def(batch_size=self.max_batch, num_threads=self.num_threads, device_id=self.device_id,
                      prefetch_queue_depth=1, exec_dynamic=True)
        def pipeline():
            jpegs = fn.external_source(name="IMAGE", dtype=types.UINT8)
            return dali_decode_resize_crop(jpegs, gpu, size, shorter)  # training's graph and constants

        pipe = pipeline()
        pipe.build()
        return pipe

    def _run(self, blobs: list[np.ndarray]) -> np.ndarray:
        out = []
        for at in range(0, len(blobs), self.max_batch):
            (images,) = self.pipe.run(IMAGE=blobs[at:at + self.max_batch])
            if self.gpu:
                images = images.as_cpu()
            out.append(np.asarray(images.as_array(), dtype=np.float32))
        return np.concatenate(out) if len(out) > 1 else out[0]

    def _safe_run(self, blobs: list[np.ndarray]) -> tuple[np.ndarray | None, str | None]:
        try:
            return self._run(blobs), None
        except Exception as exc:  # DALI raises RuntimeError for undecodable data; the pipeline is then invalid
            self.pipe = self._build()
            return None, _dali_reason(exc)

    def _response(self, pixels: np.ndarray):
        device = np.full((len(pixels), 1), -1 if self.device_id is None else self.device_id, dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[
            tensor("PIXELS", pixels),
            tensor("DECODE_DEVICE", device),
        ])

    @staticmethod
    def _blobs(request) -> list[np.ndarray]:
        """The request's encoded images: rows of IMAGE cut to IMAGE_SIZE (or whole rows)."""
        rows = input_array(request, "IMAGE")
        sizes = input_array(request, "IMAGE_SIZE")
        if rows is None or rows.ndim != 2:
            raise ValueError("IMAGE must be a [batch, bytes] uint8 tensor")
        width = rows.shape[1]
        lengths = [width] * rows.shape[0] if sizes is None else sizes.reshape(-1).tolist()
        if len(lengths) != rows.shape[0]:
            raise ValueError(f"IMAGE has {rows.shape[0]} rows but IMAGE_SIZE has {len(lengths)} values")
        blobs = []
        for j, length in enumerate(lengths):
            if not 0 < length <= width:
                raise ValueError(f"image {j} of the request: IMAGE_SIZE {length} is not in [1, {width}] "
                                 "(row width); empty images cannot be decoded")
            blobs.append(rows[j, :length])
        return blobs

    def execute(self, requests):
        responses: list = [None] * len(requests)
        batches: list[tuple[int, list[np.ndarray]]] = []
        for i, request in enumerate(requests):
            try:
                batches.append((i, self._blobs(request)))
            except ValueError as exc:
                responses[i] = pb_utils.InferenceResponse(error=error(f"preprocess: {exc}"))
        if not batches:
            return responses
        pixels, problem = self._safe_run([blob for _, blobs in batches for blob in blobs])
        if problem is None:
            at = 0
            for i, blobs in batches:
                responses[i] = self._response(pixels[at:at + len(blobs)])
                at += len(blobs)
            return responses
        if len(batches) == 1:  # nothing to isolate
            responses[batches[0][0]] = pb_utils.InferenceResponse(
                error=error(f"preprocess: cannot decode the image(s): {problem}"))
            return responses
        for i, blobs in batches:  # find the request(s) with undecodable data; the others still succeed
            pixels, problem = self._safe_run(blobs)
            responses[i] = self._response(pixels) if problem is None else pb_utils.InferenceResponse(
                error=error(f"preprocess: cannot decode the image(s): {problem}"))
        return responses

    def finalize(self):
        self.pipe = None
