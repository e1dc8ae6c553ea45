"""Images for vision models: which models read them, and how plots are made small enough.

A plot a notebook shows is a base64 PNG of any size; a vision model bills by
image tiles and its endpoint caps the request size. So images are resized
(Pillow, when installed: matplotlib brings it; not a dependency of this
package) to at most :data:`MAX_SIDE` pixels and re-encoded until they fit
``max_bytes``; without Pillow an image over the cap is left out (the
prompt's text still says a plot is there).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Iterable
from typing import Literal

from .base import ImagePart

#: Longest side of an image sent to a model (OpenAI scales larger ones down anyway).
MAX_SIDE = 1024
#: Prompt tokens one image is counted as (OpenAI: 85 + 170 per 512 px tile; a 1024 px plot is ~765).
IMAGE_TOKENS = 765
MIMES = ("image/png", "image/jpeg")

# Model names known to read images (OpenAI, Anthropic and Google through OpenAI-compatible
# proxies, and the open vision models served by vLLM / Ollama / llama.cpp).
_VISION_NAMES = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|(?:^|/)o[134](?:-(?!mini)|$)"
    r"|claude|gemini|gemma-?3|llava|bakllava|pixtral|mistral-(?:small|medium)-3|qwen[\d.]*-?vl"
    r"|internvl|minicpm-v|phi-3\.5-vision|phi-4-multimodal|llama-?3\.2-\d+b-vision|llama-?4"
    r"|moondream|smolvlm|idefics|molmo|vision|[-_]vl\b",
    re.IGNORECASE,
)


def known_vision_model(model: str) -> bool:
    """Whether ``model`` names a model known to read images (a rule of thumb for ``vision='auto'``)."""
    return bool(model) and _VISION_NAMES.search(model) is not None


def vision_enabled(setting: bool | Literal["auto"] | str, model: str) -> bool:
    """``c.DataAgent.vision``: explicit True/False wins; "auto" asks :func:`known_vision_model`."""
    if isinstance(setting, bool):
        return setting
    if str(setting).lower() in ("true", "1", "yes", "on"):
        return True
    if str(setting).lower() in ("false", "0", "no", "off"):
        return False
    return known_vision_model(model)


def _shrink(raw: bytes, max_bytes: int) -> tuple[str, bytes] | None:
    """The image at most ``MAX_SIDE`` px and ``max_bytes``, as PNG (or JPEG when PNG stays too big)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    try:
        with Image.open(io.BytesIO(raw)) as img:
            img.load()
            image = img.convert("RGBA" if img.mode in ("RGBA", "LA", "P") else "RGB")
    except Exception:  # noqa: BLE001 - not an image Pillow reads: leave it out
        return None
    side = MAX_SIDE
    while side >= 128:
        scaled = image.copy()
        scaled.thumbnail((side, side))
        buf = io.BytesIO()
        scaled.save(buf, format="PNG", optimize=True)
        if buf.tell() <= max_bytes:
            return "image/png", buf.getvalue()
        buf = io.BytesIO()
        scaled.convert("RGB").save(buf, format="JPEG", quality=80)
        if buf.tell() <= max_bytes:
            return "image/jpeg", buf.getvalue()
        side //= 2
    return None


def prepare_image(mime: str, data: str, max_bytes: int) -> ImagePart | None:
    """One image ready to send: resized to ``MAX_SIDE`` and ``max_bytes``; None when it cannot be."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    if mime not in MIMES or not raw:
        return None
    small = _small_enough(raw)
    if small and len(raw) <= max_bytes:
        return ImagePart(mime, data)
    shrunk = _shrink(raw, max_bytes)
    if shrunk is None:
        return ImagePart(mime, data) if len(raw) <= max_bytes else None
    mime, raw = shrunk
    return ImagePart(mime, base64.b64encode(raw).decode("ascii"))


def _small_enough(raw: bytes) -> bool:
    """Whether the image is at most ``MAX_SIDE`` px on each side (True when Pillow cannot tell)."""
    try:
        from PIL import Image
    except ImportError:
        return True
    try:
        with Image.open(io.BytesIO(raw)) as img:
            return max(img.size) <= MAX_SIDE
    except Exception:  # noqa: BLE001
        return False


def prepare_images(images: Iterable[tuple[str, str]], *, max_images: int,
                   max_bytes: int) -> tuple[ImagePart, ...]:
    """At most ``max_images`` images, the last ones first kept (a cell's final plot
    is usually the answer), each prepared by :func:`prepare_image`, in their order."""
    if max_images <= 0 or max_bytes <= 0:
        return ()
    kept: list[ImagePart] = []
    for mime, data in reversed(list(images)):
        part = prepare_image(mime, data, max_bytes)
        if part is not None:
            kept.append(part)
            if len(kept) >= max_images:
                break
    return tuple(reversed(kept))


__all__ = [
    "IMAGE_TOKENS",
    "MAX_SIDE",
    "known_vision_model",
    "prepare_image",
    "prepare_images",
    "vision_enabled",
]
