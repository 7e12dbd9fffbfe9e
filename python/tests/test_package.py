"""One version everywhere, and the package's public surface."""
import importlib.metadata
import re

import ctforge


def test_version_is_the_cmake_projects(cli):
    cmake = (ctforge_root() / "CMakeLists.txt").read_text()
    version = re.search(r"project\(ctforge VERSION ([0-9.]+)", cmake).group(1)
    assert ctforge.__version__ == version
    assert importlib.metadata.version("ctforge") == version
    assert cli("--version").stdout.split()[1] == version


def ctforge_root():
    from conftest import ROOT
    return ROOT


def test_public_names_exist_and_help_is_useful():
    for name in ctforge.__all__:
        assert hasattr(ctforge, name), name
    text = ctforge.__doc__
    assert "[z][y][x]" in text and "[view][row][col]" in text and "GIL" in text
    assert "radians" in ctforge.Geometry.cone.__doc__ and "mm" in ctforge.Geometry.cone.__doc__
