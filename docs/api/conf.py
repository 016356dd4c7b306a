"""Sphinx configuration of the API reference (docstrings of the public modules).

Build it with ``python -m sphinx -W -b html docs/api build/api`` from the repository
root; tests/test_docs.py builds it the same way, so a docstring Sphinx cannot render
fails the test suite.
"""

import os
import sys

# Import the package from the working tree (an editable install makes it importable too).
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import tensortools  # noqa: E402

project = "tensortools"
release = version = tensortools.__version__
root_doc = "index"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Docstrings write ``code`` and `name` alike; the latter reads as inline code.
default_role = "code"
html_theme = "alabaster"
html_static_path: list[str] = []
