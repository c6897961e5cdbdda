"""Sphinx configuration of vortonpy's documentation (see docs/README.md for the build)."""
import glob
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# An in-place build (tools/build_inplace.sh) is documented from the source tree; otherwise
# the installed vortonpy is (a clean checkout has no compiled core to import).
if glob.glob(os.path.join(ROOT, "vortonpy", "_core*.so")) or glob.glob(os.path.join(ROOT, "vortonpy", "_core*.pyd")):
    sys.path.insert(0, ROOT)

import vortonpy  # noqa: E402

# The notebooks live in notebooks/ (outside the docs' source folder): copied in at each build
# (docs/notebooks/ is git-ignored), so a notebook added there appears without editing the docs.
_nb_dst = os.path.join(HERE, "notebooks")
shutil.rmtree(_nb_dst, ignore_errors=True)
os.makedirs(_nb_dst)
for _nb in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
    shutil.copy2(_nb, _nb_dst)

# The parameter table of the API page, from the one table the core defines (vortonpy.parameters):
# written at each build (git-ignored) and included by api.md.
with open(os.path.join(HERE, "_parameters.md"), "w", encoding="utf-8") as _fh:
    _fh.write(vortonpy.parameters.markdown())

project = "vortonpy"
author = "the vortonpy authors"
copyright = "the vortonpy authors (MIT licence)"
release = vortonpy.__version__
version = release

extensions = [
    "myst_nb",               # Markdown pages (MyST) and notebooks
    "sphinx.ext.autodoc",    # the API reference from the docstrings
    "sphinx.ext.napoleon",   # NumPy- and Google-style sections in docstrings
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_parameters.md", "README.md", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# Notebooks written for Jupyter may skip heading levels; that is cosmetic, not an error.
suppress_warnings = ["myst.header"]

# Notebooks are shown as stored (outputs are stripped in git); CI executes them with the
# tests.  VORTONPY_DOCS_EXECUTE=1 runs them during the build instead (minutes each).
nb_execution_mode = "force" if os.environ.get("VORTONPY_DOCS_EXECUTE") else "off"
nb_execution_timeout = 900
nb_execution_raise_on_error = True

autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "mixed"

html_theme = "furo"
html_title = f"vortonpy {release}"
html_static_path = []
pygments_style = "friendly"
pygments_dark_style = "monokai"


# The docstrings are written for help() as well: |w| there is a magnitude, not a reST
# substitution.  Outside inline literals and literal blocks, such bars are escaped.
_LITERAL = re.compile(r"(``.+?``)")


def _escape_bars(app, what, name, obj, options, lines):
    block_indent = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if block_indent is not None:
            if not stripped or indent > block_indent:
                continue
            block_indent = None
        if "|" in line:
            parts = _LITERAL.split(line)
            lines[i] = "".join(p if p.startswith("``") else re.sub(r"(?<!\\)\|", r"\\|", p) for p in parts)
        if stripped.endswith("::"):
            block_indent = indent


# napoleon reads an attribute docstring's first line as "type: description"; the core's
# attribute docstrings are plain sentences ("ambient density against height along -gravity:
# (height, density) points ..."), so they are kept as written.
_ATTRIBUTE_DOCS = {}


def _keep_attribute_doc(app, what, name, obj, options, lines):
    if what in ("attribute", "data", "property"):
        _ATTRIBUTE_DOCS[name] = list(lines)


def _restore_attribute_doc(app, what, name, obj, options, lines):
    if what in ("attribute", "data", "property") and name in _ATTRIBUTE_DOCS:
        lines[:] = _ATTRIBUTE_DOCS.pop(name)


def setup(app):
    # napoleon runs at the default priority, 500
    app.connect("autodoc-process-docstring", _keep_attribute_doc, priority=400)
    app.connect("autodoc-process-docstring", _restore_attribute_doc, priority=600)
    app.connect("autodoc-process-docstring", _escape_bars, priority=700)
