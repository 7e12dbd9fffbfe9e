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


def test_deep_learning_modules_are_optional():
    # `import ctforge` imports neither framework; ctforge.torch / ctforge.jax without theirs
    # raise ImportError naming the extra to install (the framework hidden in a fresh process).
    import subprocess
    import sys
    code = ("import sys, ctforge; assert 'torch' not in sys.modules and 'jax' not in sys.modules,"
            " sorted(m for m in sys.modules if m.startswith(('torch', 'jax')))")
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in ("torch", "jax"):
        hide = (f"import sys; sys.modules[{name!r}] = None\n"
                f"try:\n    import ctforge.{name}\nexcept ImportError as e:\n    print(e)\n")
        r = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                           check=True)
        assert f"pip install ctforge[{name}]" in r.stdout, r.stdout + r.stderr
