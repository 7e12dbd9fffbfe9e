"""The GIL is released while computing, progress callbacks get it back, Ctrl-C cancels."""
import _thread
import threading
import time

import numpy as np
import pytest

import ctforge


@pytest.fixture(scope="module")
def slow_scan():
    """A SIRT problem taking ~1 s per few iterations on two cores."""
    g = ctforge.Geometry.cone(96, 64, 1.0, sid=300, sdd=600, angles=90)
    p = ctforge.project_analytic(ctforge.shepp_logan(40), g)
    return p, g


def test_another_thread_runs_while_reconstructing(slow_scan):
    p, g = slow_scan
    done = threading.Event()
    result = {}

    def work():
        result["vol"] = ctforge.reconstruct(p, g, algorithm="sirt", iterations=6, backend="cpu",
                                            threads=1)
        done.set()

    t = threading.Thread(target=work)
    ticks = 0
    start = time.perf_counter()
    t.start()
    while not done.is_set():  # pure-Python work: only runs while the GIL is free
        ticks += 1
        if ticks % 1000 == 0:
            time.sleep(0)
    t.join()
    elapsed = time.perf_counter() - start
    assert elapsed > 0.2, "the reconstruction was too quick to tell"
    # With the GIL held during the call this loop would stall for the whole run (a handful of
    # ticks per switch interval at most); released, it spins hundreds of thousands of times.
    assert ticks > 10000 * elapsed, (ticks, elapsed)
    assert np.isfinite(result["vol"]).all()


def test_progress_callback_sees_increasing_fractions(slow_scan):
    p, g = slow_scan
    seen = []
    ctforge.reconstruct(p, g, backend="cpu", progress=seen.append)
    assert seen[0] == 0.0 and seen[-1] == 1.0
    assert all(b >= a for a, b in zip(seen, seen[1:])) and len(seen) >= 5


def test_keyboard_interrupt_cancels_within_an_iteration(slow_scan):
    p, g = slow_scan
    t0 = time.perf_counter()
    ctforge.reconstruct(p, g, algorithm="sirt", iterations=2, backend="cpu")
    per_iteration = (time.perf_counter() - t0) / 2
    timer = threading.Timer(3 * per_iteration, _thread.interrupt_main)  # a Ctrl-C, 3 iterations in
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        ctforge.reconstruct(p, g, algorithm="sirt", iterations=200, backend="cpu")
    elapsed = time.perf_counter() - t0
    timer.join()
    assert elapsed < 3 * per_iteration + 3 * per_iteration + 1.0, (elapsed, per_iteration)
    # The next call runs normally.
    vol = ctforge.reconstruct(p, g, algorithm="sirt", iterations=1, backend="cpu")
    assert np.isfinite(vol).all()


def test_fdk_is_interruptible_too(slow_scan):
    p, g = slow_scan
    calls = []

    def interrupt_at_first_batch(f):
        calls.append(f)
        if f > 0:
            _thread.interrupt_main()

    with pytest.raises(KeyboardInterrupt):
        ctforge.reconstruct(p, g, backend="cpu", progress=interrupt_at_first_batch)
    assert max(calls) < 0.5  # stopped long before the end


def test_an_exception_in_the_progress_callback_stops_the_call(slow_scan):
    p, g = slow_scan

    def fail(f):
        if f > 0.2:
            raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        ctforge.reconstruct(p, g, algorithm="sirt", iterations=20, backend="cpu", progress=fail)


def test_checkpointed_reconstruction_resumes_after_ctrl_c(slow_scan, tmp_path):
    p, g = slow_scan
    grid = ctforge.default_grid(g, shape=(32, 48, 48))
    ref = ctforge.reconstruct(p, g, grid, backend="cpu")
    ck = tmp_path / "ck"
    done = []

    def interrupt_after_two_units(f):
        done.append(f)
        if len(list(ck.glob("slab_*.json"))) >= 2:
            _thread.interrupt_main()

    with pytest.raises(KeyboardInterrupt):
        ctforge.reconstruct(p, g, grid, backend="cpu", checkpoint_dir=ck, unit_planes=4,
                            progress=interrupt_after_two_units)
    kept = len(list(ck.glob("slab_*.json")))
    assert 2 <= kept < 8
    # Other options: refused, naming the difference.
    with pytest.raises(ctforge.UsageError, match="filter"):
        ctforge.reconstruct(p, g, grid, backend="cpu", checkpoint_dir=ck, unit_planes=4,
                            filter="hann")
    vol = ctforge.reconstruct(p, g, grid, backend="cpu", checkpoint_dir=ck, unit_planes=4)
    # Each slab filters its own band of rows (float rounding of the FFT differs by ~1e-6 of the
    # peak); a wrong band or a misplaced slab is off by >= 1e-3.
    peak = float(np.abs(ref).max())
    assert np.abs(vol - ref).max() < 1e-5 * peak and np.abs(vol - ref).mean() < 1e-7 * peak
    again = ctforge.reconstruct(p, g, grid, backend="cpu", checkpoint_dir=tmp_path / "ck2",
                                unit_planes=4)
    assert np.array_equal(vol, again)  # resumed == uninterrupted, bit for bit
    assert list(ck.glob("slab_*")) == []  # removed once returned
