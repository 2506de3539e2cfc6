"""Fixtures of the compose stack's tests."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.orders.reference import ExpectedOrders
from tests.containers.orders_stack import generator_records


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, Any]]:
    """What the generator service's events fold into, by the plain-Python model of the rules."""
    return ExpectedOrders().run(generator_records()).active()
