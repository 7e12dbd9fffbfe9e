"""The hand-kept stubs (_core.pyi) name exactly what the extension module has, with the same
parameter names, so editors and type checkers see the real API."""
import ast
import inspect
import pathlib
import re

import ctforge
from ctforge import _core

STUB = pathlib.Path(ctforge.__file__).with_name("_core.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_functions(body):
    """Parameter names of each function, "**name" for keyword options (as pybind11 writes
    py::kwargs: "**kwargs")."""
    def names(args):
        return [a.arg for a in args.args] + (["**" + args.kwarg.arg] if args.kwarg else [])
    return {n.name: names(n.args) for n in body if isinstance(n, ast.FunctionDef)}


def module_params(fn):
    """Parameter names from pybind11's signature line: name(a: T, b: T = ...) -> R."""
    first = fn.__doc__.splitlines()[0]
    inner = first[first.index("(") + 1:first.rindex(") ->")]
    names, depth, current = [], 0, ""
    for ch in inner:
        depth += ch in "[(" and 1 or 0
        depth -= ch in "])" and 1 or 0
        if ch == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        names.append(current)
    return [re.split(r"[:=]", n.strip())[0].strip() for n in names]


def public(obj):
    return {n for n in dir(obj) if not n.startswith("__")}


def test_module_functions_match():
    tree = stub_tree()
    stubs = stub_functions(tree.body)
    funcs = {n for n in public(_core) if inspect.isbuiltin(getattr(_core, n))}
    assert funcs == set(stubs), (funcs ^ set(stubs))
    for name in funcs:
        assert module_params(getattr(_core, name)) == stubs[name], name


def test_classes_and_attributes_match():
    tree = stub_tree()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for cls_name in ("Geometry", "VolumeGeometry", "Phantom", "DeviceArray", "SlabRun",
                     "VolumeFileWriter", "ProjectorPair"):
        cls = getattr(_core, cls_name)
        members = {n for n in public(cls) if not n.startswith("_")}
        stubbed = set(stub_functions(classes[cls_name].body)) - {"__init__"}
        assert members == stubbed, (cls_name, members ^ stubbed)
    assert {"Error", "UsageError"} <= set(classes)
    values = {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target]}
    assert {"__version__", "cuda_compiled"} <= values


def test_package_functions_have_docstrings_with_units():
    for name in ctforge.__all__:
        obj = getattr(ctforge, name)
        if callable(obj) and not isinstance(obj, type):
            assert obj.__doc__ and len(obj.__doc__) > 40, name
    assert "mm" in ctforge.reconstruct.__doc__ or "mm" in ctforge.default_grid.__doc__
    assert "radians" in ctforge.Geometry.cone.__doc__
