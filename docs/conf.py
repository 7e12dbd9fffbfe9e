# Sphinx configuration of the ctforge documentation: Markdown pages (MyST), the example
# notebook (myst-nb, rendered with the outputs of a run at build time), the Python API
# (autodoc of the installed package), the C++ API (Doxygen XML + breathe) and the command-line
# reference from the binary's --help (_ext/ctforge_docs.py). Build with `make docs`; no network
# is needed (no intersphinx, no remote images).
import pathlib
import re
import sys

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "ctforge"
author = "the ctforge authors"
# The version of the CMake project (what `ctforge --version` prints).
release = re.search(r"project\(ctforge VERSION ([0-9.]+)",
                    (DOCS.parent / "CMakeLists.txt").read_text()).group(1)
version = release

extensions = [
    "myst_nb",               # MyST Markdown pages and .ipynb notebooks
    "sphinx.ext.autodoc",
    "breathe",
    "ctforge_docs",          # CLI reference, executed notebook, Doxygen XML
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "bench/peers.md", "**/.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3          # [text](page.md#a-heading) links to headings of levels 1-3
nb_execution_mode = "off"         # executed by ctforge_docs.execute_notebook, with nbclient
nb_merge_streams = True

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}

breathe_default_members = ("members",)
breathe_show_include = True
cpp_index_common_prefix = ["ctforge::"]

html_theme = "alabaster"
html_title = f"ctforge {release}"
html_static_path = []
html_theme_options = {"description": "CT reconstruction and simulation on CPUs and CUDA GPUs",
                      "fixed_sidebar": True, "show_relbars": True}
