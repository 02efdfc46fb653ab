"""JSON for message properties, keeping bytes header values as bytes."""

from __future__ import annotations

import base64
import json
from typing import Any


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"__b64__": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot store {type(value).__name__}")


def _decode(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "__b64__" in obj:
        return base64.b64decode(obj["__b64__"])
    return obj


def dumps(props: dict[str, Any]) -> str:
    return json.dumps(props, default=_encode, separators=(",", ":"))


def loads(text: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(text, object_hook=_decode)
    return result
