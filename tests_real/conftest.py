"""The real-library tier: launch settings ftopt writes, handed to the libraries they are written for (CPU builds).

Run by ``.ci/launch-check`` in its own virtual environments (versions pinned in ``.ci/launch-requirements*.txt``);
every test in this folder runs there, none is skipped.
"""
