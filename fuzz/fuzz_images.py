"""Image bytes at ingest: `verify_image` gives None or one clean reason (never raises, never a Python repr)."""

from common import encoded_image, fuzz, instrumented

with instrumented():
    from workbench.data import verify_image


def target(data: bytes) -> None:
    reason = verify_image(data)
    assert reason is None or (reason and "\n" not in reason and " at 0x" not in reason), reason


if __name__ == "__main__":
    fuzz("images", target, [encoded_image(fmt) for fmt in ("JPEG", "PNG", "GIF", "BMP", "WEBP", "TIFF")])
