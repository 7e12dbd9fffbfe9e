"""Options across the Python boundary: the library's table of algorithm-specific options
decides which option applies to which algorithm (its names are ctforge.reconstruct's
keywords); _core takes keyword options, refusing an unknown one or a wrong type by name; the
host memory limit of FDK / FBP."""
import inspect
import re

import numpy as np
import pytest

import ctforge
from ctforge import _core

ALGORITHMS = ("fdk", "fbp", "helical-fbp", "sirt", "os-sart", "cgls", "fista-tv", "osem")

# A value other than the default for every option of the table.
GIVEN = {"iterations": 3, "relaxation": 0.5, "nonnegative": True, "subsets": 2,
         "tv_weight": 1e-3, "tv_iterations": 5, "backprojector": "matched", "tolerance": 1e-3,
         "return_log": True, "filter": "hann", "cutoff": 0.5, "displaced_detector": "on",
         "offset_transition": 8.0, "checkpoint_every": 2, "checkpoint_seconds": 5.0,
         "unit_planes": 2, "helical_q": 0.5}


def small_scan(beam):
    angles = np.arange(12) * (2 * np.pi / 12)
    if beam == "cone":
        g = ctforge.Geometry.cone(cols=16, rows=8, pixel_size=1.0, sid=100, sdd=200, angles=angles)
    else:
        g = ctforge.Geometry.parallel(cols=16, rows=8, pixel_size=1.0, angles=angles)
    return np.zeros(g.projection_shape, np.float32), g


def test_table_entries_are_reconstruct_keywords():
    table = _core.recon_option_table()
    params = inspect.signature(ctforge.reconstruct).parameters
    assert len(table) >= 17
    for entry in table:
        assert set(entry) == {"name", "flag", "algorithms", "needs", "help"}
        assert entry["name"] in params, entry["name"]
        assert params[entry["name"]].kind is inspect.Parameter.KEYWORD_ONLY
        assert entry["flag"].startswith("--") and entry["help"]
        assert entry["algorithms"] and set(entry["algorithms"]) <= set(ALGORITHMS)
        assert entry["needs"] in ("", *params)
    assert set(GIVEN) | {"initial"} == {e["name"] for e in table}


@pytest.mark.parametrize("entry", _core.recon_option_table(), ids=lambda e: e["name"])
def test_inapplicable_option_refused_for_every_algorithm_outside_its_scope(entry):
    name = entry["name"]
    for algo in sorted(set(ALGORITHMS) - set(entry["algorithms"])):
        p, g = small_scan("parallel" if algo == "fbp" else "cone")
        value = np.zeros((4, 4, 4), np.float32) if name == "initial" else GIVEN[name]
        only = ", ".join(entry["algorithms"])
        message = f"{name}: does not apply to algorithm {algo} (only to {only})"
        with pytest.raises(ctforge.UsageError, match=re.escape(message)):
            ctforge.reconstruct(p, g, {"shape": (4, 4, 4)}, algorithm=algo, **{name: value})


def test_require_option_applies_names_the_scope():
    _core.require_option_applies("subsets", "osem")  # applies: nothing raised
    with pytest.raises(ctforge.UsageError,
                       match=r"^subsets: does not apply to algorithm sirt \(only to os-sart, osem\)$"):
        _core.require_option_applies("subsets", "sirt")
    with pytest.raises(ctforge.UsageError, match="threads: not an algorithm-specific"):
        _core.require_option_applies("threads", "fdk")


def test_options_at_their_defaults_are_not_refused():
    p, g = small_scan("cone")
    vg = ctforge.default_grid(g, (4, 8, 8))
    a = ctforge.reconstruct(p, g, vg, algorithm="sirt", iterations=2, filter="ram-lak",
                            cutoff=1.0, displaced_detector="auto", tv_weight=0.0)
    assert a.shape == (4, 8, 8)


def test_core_takes_keyword_options_and_refuses_unknown_ones():
    p, g = small_scan("parallel")
    vg = ctforge.default_grid(g, (4, 8, 8))
    ref = ctforge.reconstruct(p + 1, g, vg, backend="cpu")
    assert np.array_equal(_core.reconstruct(p + 1, g._g, vg, algorithm="fbp", backend="cpu"), ref)
    # The algorithm defaults to the geometry's.
    assert np.array_equal(_core.reconstruct(p + 1, g._g, vg, backend="cpu"), ref)
    with pytest.raises(ctforge.UsageError, match="reconstruct: unknown option 'iteration'"):
        _core.reconstruct(p, g._g, vg, algorithm="sirt", iteration=3)
    with pytest.raises(ctforge.UsageError, match="iterations: expected an integer"):
        _core.reconstruct(p, g._g, vg, algorithm="sirt", iterations="3")
    with pytest.raises(ctforge.UsageError, match="cutoff: expected a number"):
        _core.reconstruct(p, g._g, vg, cutoff="0.5")
    with pytest.raises(ctforge.UsageError, match="nonnegative: expected True or False"):
        _core.reconstruct(p, g._g, vg, algorithm="sirt", nonnegative="yes")
    with pytest.raises(ctforge.UsageError, match="backend: expected a string"):
        _core.reconstruct(p, g._g, vg, backend=1)
    with pytest.raises(ctforge.UsageError, match="forward_project: unknown option 'bakend'"):
        _core.forward_project(np.zeros(vg.shape, np.float32), vg, g._g, bakend="cpu")
    with pytest.raises(ctforge.UsageError, match="back_project: unknown option 'matchd'"):
        _core.back_project(p, g._g, vg, matchd=True)
    with pytest.raises(ctforge.UsageError, match="ProjectorPair: unknown option 'device_id'"):
        _core.ProjectorPair(g._g, vg, device_id=0)
    with pytest.raises(ctforge.UsageError, match="read_projections: unknown option 'flats'"):
        _core.read_projections("missing.h5", flats="f.h5")
    with pytest.raises(ctforge.UsageError, match="gpu_memory_limit: must be >= 0"):
        _core.forward_project(np.zeros(vg.shape, np.float32), vg, g._g, gpu_memory_limit=-1)


def test_memory_limit_refuses_fdk_that_does_not_fit_and_changes_nothing_that_does():
    p, g = small_scan("cone")
    p += 0.01
    vg = ctforge.default_grid(g, (8, 16, 16))
    ref = ctforge.reconstruct(p, g, vg, backend="cpu")
    # Generous limits, as a byte count or a string: the same result, bit for bit.
    assert np.array_equal(ctforge.reconstruct(p, g, vg, backend="cpu", memory_limit="1G"), ref)
    assert np.array_equal(ctforge.reconstruct(p, g, vg, backend="cpu", memory_limit=1 << 30), ref)
    # Below what the projections and the volume need: refused before anything runs, naming the
    # sizes.
    sizes = (r"^fdk: the projections \(6144 bytes\) and the volume \(8192 bytes\) need \d+ "
             r"bytes .* more than the memory limit \(4096 bytes")
    with pytest.raises(ctforge.UsageError, match=sizes):
        ctforge.reconstruct(p, g, vg, backend="cpu", memory_limit="4K")
    with pytest.raises(ctforge.UsageError, match=sizes):
        ctforge.reconstruct(p, g, vg, backend="cpu", memory_limit=4096)
    with pytest.raises(ctforge.UsageError, match="memory_limit: '8X' is not a byte count"):
        ctforge.reconstruct(p, g, vg, memory_limit="8X")
    with pytest.raises(ctforge.UsageError, match="memory_limit: must be a positive byte count"):
        ctforge.reconstruct(p, g, vg, memory_limit=-5)
