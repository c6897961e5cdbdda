"""The example notebooks run as tests (nbmake); each runs a scene for seconds to a minute, so
all are marked slow: `pytest -m "not slow"` is the quick run."""
import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
