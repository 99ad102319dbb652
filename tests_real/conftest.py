"""The real-library tier: launch settings ftopt writes, handed to the libraries they are written for (CPU builds).

Run by ``.ci/launch-check`` in its own virtual environment (versions pinned in ``.ci/launch-requirements.txt``).
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _quiet_library_warnings(recwarn):
    """The libraries' own deprecation warnings are theirs, not ours: this tier checks errors, not warnings."""
    yield
