"""Every builder test runs against its own engine cache folder."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(private_engine_cache):
    yield
