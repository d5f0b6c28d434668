"""Hands each probe test's node to probe_table, so that the rows it prints also reach the JUnit
report (`./pants test --report`) as properties, where .ci/test_summary.py prints the table."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

import probe_table


@pytest.fixture(autouse=True)
def _probe_node(request: Any) -> Iterator[None]:
    probe_table.CURRENT_NODE = request.node
    yield
    probe_table.CURRENT_NODE = None
