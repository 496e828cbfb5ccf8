"""Image preprocessing constants and the DALI graph that training and serving share.

Why one module: a classifier answers correctly only when the server's preprocessing is the one it was
trained with. Training normalises with these ImageNet statistics (torch: `pipelines.common.TrainStep`,
DALI: `workbench.adapters.dali`), and Triton's preprocess model (triton_models/preprocess) builds its
graph with `dali_decode_resize_crop` below, so the resize rule and the constants have one definition.

Resize rules (`resize_shorter`): DALI training resizes the shorter side to ``size * 256 // 224`` and
crops the centre ``size`` square (the ImageNet 256/224 convention); torch decoding
(`workbench.adapters.torch.decode_transform`) resizes the shorter side to ``size`` and crops the same.
A checkpoint records which one its model saw (`workbench.model_serving`).

No heavy imports at module level: Triton's python-backend models import this (DALI only inside
`dali_decode_resize_crop`).
"""

from __future__ import annotations

from typing import Any

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# the same on the 0..255 scale of decoded uint8 pixels (what DALI's crop_mirror_normalize takes)
MEAN_255 = tuple(m * 255 for m in IMAGENET_MEAN)
STD_255 = tuple(s * 255 for s in IMAGENET_STD)
SERVING_SIZE = 224  # the shared Triton repository's classifier input (3 x 224 x 224)
DECODERS = ("dali", "torch")


def resize_shorter(size: int, decode: str = "dali") -> int:
    """The shorter side an image is resized to before the centre `size` crop, as the `decode` path does."""
    if decode == "dali":
        return size * 256 // 224
    if decode == "torch":
        return size
    raise ValueError(f"decode must be one of {', '.join(DECODERS)}, got {decode!r}")


def dali_decode_resize_crop(jpegs: Any, gpu: bool, size: int, shorter: int | None = None) -> Any:
    """DALI nodes: decode (nvJPEG when `gpu`), resize the shorter side to `shorter` (default: the DALI rule),
    crop the centre `size` square, normalise with the ImageNet statistics, CHW float32."""
    from nvidia.dali import fn, types

    images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
    images = fn.resize(images, resize_shorter=shorter or resize_shorter(size, "dali"), antialias=True)
    return fn.crop_mirror_normalize(images, crop=(size, size), mean=list(MEAN_255), std=list(STD_255),
                                    dtype=types.FLOAT, output_layout="CHW")
