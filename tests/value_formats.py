"""Value formats 1 -> 2 -> 3 and their converters, shared by the format tests and their child
process: format 1 is {"i": n}, format 2 {"id": n, "v": 2}, format 3 adds a name. The converter
from 1 refuses a value that is already format 2, so converting anything twice fails loudly."""

from __future__ import annotations

import time
from typing import Any

BAD_ID = 13  # no format 3 form: its converter raises


def v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    return {"id": value["i"], "v": 2}


def v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    if value["id"] == BAD_ID:
        raise ValueError(f"{BAD_ID} has no format 3 form")
    return {**value, "v": 3, "name": f"n{value['id']}"}


def slow_v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.0005)  # so a kill lands inside the eager pass on any machine
    return v2_to_v3(value)


CONVERTERS = {1: v1_to_v2, 2: v2_to_v3}


def v3(i: int) -> dict[str, Any]:
    return {"id": i, "v": 3, "name": f"n{i}"}
