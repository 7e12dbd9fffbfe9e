"""The iterative methods from Python: every method through reconstruct(), the per-iteration log
(return_log=True), the tolerance, a warm start, option errors, and the CLI's result for the same
options."""
import csv

import numpy as np
import pytest

import ctforge

METHODS = [("sirt", {}), ("os-sart", {"subsets": 5}), ("cgls", {}),
           ("fista-tv", {"tv_weight": 5e-5, "tv_iterations": 10}), ("osem", {"subsets": 4})]


@pytest.fixture(scope="module")
def scan():
    g = ctforge.Geometry.cone(cols=40, rows=32, pixel_size=1.2, sid=120, sdd=200, angles=40)
    grid = ctforge.VolumeGeometry(20, 24, 24, (1.25, 1.25, 1.25))
    truth = ctforge.voxelize(ctforge.shepp_logan(28), grid, 2)
    p = ctforge.forward_project(truth, g, grid, backend="cpu")
    return g, grid, truth, p


@pytest.mark.parametrize("name,extra", METHODS)
def test_every_method_converges_and_logs_its_iterations(scan, name, extra):
    """Twelve iterations are closer to the truth than one; the log has one dict per iteration,
    numbered from 1, with the residual falling."""
    g, grid, truth, p = scan
    one = ctforge.reconstruct(p, g, grid, algorithm=name, iterations=1, backend="cpu", **extra)
    vol, log = ctforge.reconstruct(p, g, grid, algorithm=name, iterations=12, backend="cpu",
                                   return_log=True, **extra)
    assert vol.shape == grid.shape and np.isfinite(vol).all()
    err = lambda v: np.linalg.norm(v - truth) / np.linalg.norm(truth)
    assert err(vol) < 0.8 * err(one)
    assert [row["iteration"] for row in log] == list(range(1, 13))
    assert set(log[0]) == {"iteration", "residual", "objective", "relative_update", "seconds",
                           "stop_criterion"}
    assert log[-1]["residual"] < log[0]["residual"]


def test_tolerance_warm_start_and_errors(scan):
    g, grid, truth, p = scan
    _, log = ctforge.reconstruct(p, g, grid, algorithm="sirt", iterations=300, tolerance=0.02,
                                 backend="cpu", return_log=True)
    assert 1 < len(log) < 300 and log[-1]["relative_update"] < 0.02
    assert all(row["stop_criterion"] == row["relative_update"] for row in log)
    # CGLS stops on its relative gradient, which the log shows as the stop criterion.
    _, log = ctforge.reconstruct(p, g, grid, algorithm="cgls", iterations=100, tolerance=0.05,
                                 backend="cpu", return_log=True)
    assert 1 < len(log) < 100 and log[-1]["stop_criterion"] < 0.05
    assert all(row["stop_criterion"] >= 0.05 for row in log[:-1])
    converged = ctforge.reconstruct(p, g, grid, algorithm="cgls", iterations=40, backend="cpu")
    again, log = ctforge.reconstruct(p, g, grid, algorithm="cgls", iterations=40, tolerance=1e-3,
                                     initial=converged, backend="cpu", return_log=True)
    assert len(log) <= 1
    assert np.linalg.norm(again - converged) < 1e-3 * np.linalg.norm(converged)
    with pytest.raises(ctforge.UsageError, match="tv-weight"):
        ctforge.reconstruct(p, g, grid, algorithm="fista-tv", backend="cpu")
    with pytest.raises(ctforge.UsageError, match="backprojector voxel"):
        ctforge.reconstruct(p, g, grid, algorithm="cgls", backprojector="voxel", backend="cpu")
    with pytest.raises(ctforge.UsageError, match="initial"):
        ctforge.reconstruct(p, g, grid, algorithm="sirt", initial=np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ctforge.UsageError, match="subsets"):
        ctforge.reconstruct(p, g, grid, algorithm="fdk", subsets=4)
    # Options of other methods are refused as on the command line, and counts must be integers.
    for kw in ({"algorithm": "fdk", "iterations": 5}, {"algorithm": "fdk", "nonnegative": True},
               {"algorithm": "sirt", "tv_weight": 1e-3}, {"algorithm": "cgls", "subsets": 4},
               {"algorithm": "sirt", "filter": "hann"}, {"algorithm": "sirt", "cutoff": 0.5},
               {"algorithm": "sirt", "checkpoint_every": 2}):
        name = next(k for k in kw if k != "algorithm")
        with pytest.raises(ctforge.UsageError, match=name):
            ctforge.reconstruct(p, g, grid, backend="cpu", **kw)
    with pytest.raises(ctforge.UsageError, match="iterations: expected an integer"):
        ctforge.reconstruct(p, g, grid, algorithm="sirt", iterations=2.5, backend="cpu")
    # OSEM takes negative values (noise) as 0: the same volume as from the clamped data.
    noisy = p.copy()
    noisy[:, ::3, ::2] -= 0.5 * p.max()
    np.testing.assert_array_equal(
        ctforge.reconstruct(noisy, g, grid, algorithm="osem", iterations=2, backend="cpu"),
        ctforge.reconstruct(np.maximum(noisy, 0), g, grid, algorithm="osem", iterations=2,
                            backend="cpu"))


def test_matches_the_command_line(cli, tmp_path, scan):
    """The same scan and options through ctforge recon give the same volume and log."""
    g, grid, _, p = scan
    ctforge.write_projections(tmp_path / "p.h5", p, g)
    vol, log = ctforge.reconstruct(p, g, grid, algorithm="os-sart", iterations=3, subsets=5,
                                   backend="cpu", threads=2, return_log=True)
    cli("recon", str(tmp_path / "p.h5"), "-o", str(tmp_path / "v.h5"), "--algorithm", "os-sart",
        "--iterations", "3", "--subsets", "5", "--backend", "cpu", "--threads", "2",
        "--size-xyz", "24,24,20", "--spacing", "1.25",
        "--log-iterations", str(tmp_path / "log.csv"), "--quiet")
    from_cli, _ = ctforge.read_volume(tmp_path / "v.h5")
    np.testing.assert_array_equal(from_cli, vol)
    with open(tmp_path / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    for r, d in zip(rows, log):
        assert float(r["residual"]) == pytest.approx(d["residual"], rel=1e-6)
