"""No copies on the way in (C-contiguous float32 is read in place) or out (results own the C++
buffer), checked through buffer addresses and the peak memory of large calls."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ctforge
from ctforge import _core


def test_results_own_the_cpp_buffer(small_cone):
    p = ctforge.project_analytic(ctforge.shepp_logan(30), small_cone)
    assert p.flags.c_contiguous and p.dtype == np.float32 and p.flags.writeable
    assert "capsule" in type(p.base).__name__.lower()  # owns the std::vector through it
    q = np.from_dlpack(p)
    assert np.shares_memory(p, q) and _core._data_address(q) == _core._data_address(p)


def test_float32_c_order_input_is_not_converted():
    a = np.zeros((3, 4, 5), np.float32)
    assert ctforge._as_float32(a, 3, "x") is a
    b = np.zeros((3, 4, 5), np.float64)
    assert not np.shares_memory(ctforge._as_float32(b, 3, "x"), b)  # converted once
    c = np.zeros((5, 4, 3), np.float32).transpose()
    assert ctforge._as_float32(c, 3, "x").flags.c_contiguous


def test_dlpack_producers_are_read_in_place():
    class Producer:  # any library's CPU tensor: only the DLPack protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    got = ctforge._as_float32(Producer(a), 3, "x")
    assert _core._data_address(got) == _core._data_address(a)
    g = ctforge.Geometry.parallel(5, 4, 1.0, 3)
    assert np.array_equal(ctforge.back_project(Producer(a), g, backend="cpu"),
                          ctforge.back_project(a, g, backend="cpu"))


def test_device_arrays_are_routed_to_the_cuda_path():
    class OnGpu:  # a CuPy / PyTorch CUDA array as the protocol shows it
        def __init__(self):
            self.streams = []

        def __dlpack__(self, stream=None, **kw):
            self.streams.append(stream)
            return _core._fake_cuda_capsule(3, 4, 5)

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    g = ctforge.Geometry.parallel(5, 4, 1.0, 3)
    x = OnGpu()
    # The checks that run before any device access: the backend, the algorithm, the device.
    with pytest.raises(ctforge.UsageError, match="CUDA backend, not --backend cpu"):
        ctforge.reconstruct(x, g, backend="cpu")
    with pytest.raises(ctforge.UsageError, match="fdk or fbp"):
        ctforge.reconstruct(x, g, algorithm="sirt")
    with pytest.raises(ctforge.UsageError, match="device=1"):
        ctforge.reconstruct(x, g, device=1)
    assert x.streams == [1, 1, 1]  # asked for the legacy default stream (DLPack protocol)
    if ctforge.backend_for()[0] != "cuda":
        with pytest.raises(ctforge.Error, match="CUDA"):
            ctforge.reconstruct(x, g)
        with pytest.raises(ctforge.Error, match="CUDA"):
            ctforge.reconstruct(np.zeros((3, 4, 5), np.float32), g, out="device")
    # The other functions do not take GPU memory yet, and say so.
    with pytest.raises(ctforge.UsageError, match="reconstruct only"):
        ctforge.back_project(x, g)


def test_dlpack_capsules_are_parsed_in_cpp():
    # The module's own DLPack reader on real (host) capsules: the same result as the array,
    # and layouts or types it cannot read in place are refused by name.
    g = ctforge.Geometry.parallel(8, 3, 1.0, 6)
    p = ctforge.project_analytic(ctforge.phantom([{"center": [0, 0, 0], "semi_axes": [2, 2, 2],
                                                    "density": 0.1}]), g)
    vg = ctforge.default_grid(g)
    ref = ctforge.reconstruct(p, g, vg, backend="cpu")
    args = (g._g, vg)
    kw = dict(algorithm="fbp", backend="cpu")
    assert np.array_equal(_core.reconstruct(p.__dlpack__(), *args, **kw), ref)
    with pytest.raises(ctforge.UsageError, match="C-contiguous"):
        _core.reconstruct(np.ascontiguousarray(np.repeat(p, 2, axis=2))[:, :, ::2].__dlpack__(),
                          *args, **kw)
    with pytest.raises(ctforge.UsageError, match="float32"):
        _core.reconstruct(p.astype(np.float64).__dlpack__(), *args, **kw)
    with pytest.raises(ctforge.UsageError, match="3 dimensions"):
        _core.reconstruct(p[0].__dlpack__(), *args, **kw)


def test_device_array_needs_cuda():
    if ctforge.backend_for()[0] == "cuda":
        a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        d = ctforge.to_device(a)
        assert d.shape == (2, 3, 4) and d.__dlpack_device__() == (2, 0)
        assert np.array_equal(d.to_numpy(), a)
    else:
        with pytest.raises(ctforge.Error):
            ctforge.to_device(np.zeros(3, np.float32))


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (a 200 MB download)")
    t = torch.zeros((3, 4, 5), dtype=torch.float32)
    assert _core._data_address(ctforge._as_float32(t, 3, "x")) == t.data_ptr()


# The peak is the process's VmHWM (its own memory's high-water mark, new with exec), not
# getrusage's ru_maxrss: Linux carries that over from the parent through fork and exec, so after
# the parent has grown (e.g. imported PyTorch) a child's growth below that mark reads as 0.
PEAK = textwrap.dedent("""
    import sys, numpy as np, ctforge
    def peak_kb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    op, dtype = sys.argv[1], sys.argv[2]
    if op == "forward":                       # 320^3 float32 = 131 MB volume in, 512 B out
        data = np.ones((320, 320, 320), dtype)
        g = ctforge.Geometry.parallel(8, 8, 1.0, 2)
    else:                                     # 200 x 400 x 400 float32 = 128 MB views in
        data = np.ones((200, 400, 400), dtype)
        g = ctforge.Geometry.parallel(400, 400, 1.0, 200)
    data[:] = 0.01
    before = peak_kb()
    if op == "forward":
        out = ctforge.forward_project(data, g, backend="cpu", threads=2)
    else:
        out = ctforge.back_project(data, g, ctforge.VolumeGeometry(4, 4, 4, (1, 1, 1)),
                                   backend="cpu", threads=2)
    after = peak_kb()
    print((after - before) / 1024.0)          # MB the call added to the peak
""")


def peak_growth_mb(op, dtype):
    r = subprocess.run([sys.executable, "-c", PEAK, op, dtype], capture_output=True, text=True,
                       check=True)
    return float(r.stdout.split()[-1])


@pytest.mark.parametrize("op", ["forward", "back"])
def test_a_large_call_needs_no_memory_beyond_input_and_output(op):
    # float32 C order: read in place, so the peak does not grow by the ~130 MB input (back
    # projection borders 1/8 of the views at a time: 16 MB); the negative control (float64
    # input, converted once to float32) grows by about 130 MB.
    in_place = peak_growth_mb(op, "float32")
    converted = peak_growth_mb(op, "float64")
    assert in_place < 30, in_place
    assert converted > 100, converted


@pytest.mark.skipif(ctforge.backend_for()[0] != "cuda", reason="no usable CUDA device")
def test_gpu_memory_in_and_out_equal_the_host_path():
    g = ctforge.Geometry.cone(41, 23, 1.0, sid=200, sdd=400, angles=80)
    p = ctforge.project_analytic(ctforge.shepp_logan(30), g)
    grid = ctforge.VolumeGeometry(19, 25, 27, (0.6, 0.6, 0.6))
    host = ctforge.reconstruct(p, g, grid, backend="cuda")
    on_gpu = ctforge.reconstruct(ctforge.to_device(p), g, grid, backend="cuda")  # DLPack in
    assert np.array_equal(on_gpu, host)
    out = ctforge.reconstruct(p, g, grid, backend="cuda", out="device")  # stays on the GPU
    assert out.shape == host.shape and out.__dlpack_device__() == (2, 0)
    assert np.array_equal(out.to_numpy(), host)
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    assert np.array_equal(cupy.asnumpy(cupy.from_dlpack(out)), host)
    assert np.array_equal(ctforge.reconstruct(cupy.asarray(p), g, grid, backend="cuda"), host)
