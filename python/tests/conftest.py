"""Shared fixtures: the command line to compare against, the repository's data folder."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

import ctforge

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """Runs the `ctforge` command line (CTFORGE_CLI, default build/apps/ctforge)."""
    path = pathlib.Path(os.environ.get("CTFORGE_CLI", ROOT / "build" / "apps" / "ctforge"))
    if not path.exists():
        pytest.skip(f"the ctforge command line is not built ({path}); set CTFORGE_CLI")

    def run(*args, check=True):
        r = subprocess.run([str(path), *map(str, args)], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"ctforge {' '.join(map(str, args))} -> {r.returncode}\n{r.stderr}")
        return r

    return run


@pytest.fixture(scope="session")
def moto_endpoint():
    """A moto S3 server (a test server: objects in its memory) on 127.0.0.1 at a free port,
    started for the tests that ask for it and stopped after them."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def data_dir():
    return pathlib.Path(os.environ.get("CTFORGE_DATA_DIR", ROOT / "data"))


@pytest.fixture
def small_cone():
    """A small cone-beam scan with odd sizes (the FDK path's edge cases)."""
    return ctforge.Geometry.cone(cols=37, rows=21, pixel_size=(1.0, 1.2), sid=200.0, sdd=400.0,
                                 angles=np.arange(45) * (2 * np.pi / 45))


@pytest.fixture
def geometry_file(tmp_path, small_cone):
    path = tmp_path / "geom.json"
    path.write_text(small_cone.to_json())
    return path
