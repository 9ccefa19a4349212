"""The compat tier: real third-party training programs run unchanged under `kdist run --local`."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too so that running this directory alone never warns about the marker.
    config.addinivalue_line(
        "markers", "compat: real third-party training programs under kdist run --local"
    )
