"""A Dask worker cut off from the network mid-run, with real `dask scheduler` / `dask worker`
processes (started and stopped here). One worker runs in a network namespace of its own, joined
to this one by a private veth link (10.231.X.0/30) that the test makes and removes with the
namespace; the scheduler and the other worker listen on the link's host side, the only address
the namespace can reach. Once the namespaced worker has computed a unit of an FDK run, an
nftables table in its namespace drops every packet in and out (the link stays up and nothing
is closed: to Dask the worker goes silent, as when a machine's network is cut). The scheduler
drops the silent worker and runs its units again on the other, the run completes with the
volume bit-identical to the one-process units, and the run report accounts for every unit,
the cut worker's among them.

Needs root (a network namespace and nftables rules), `ip` (iproute2) and `nft` (nftables):
skipped with the reason otherwise. Short timeouts (for the scheduler, the workers and this
client) let Dask notice the cut in seconds: the scheduler checks the workers' heartbeats every
`worker-ttl` (1 s) and drops a worker silent for 5 s (its least: ten heartbeats of 0.5 s) once
its nanny's `connect` timeout (5 s) has passed; the `tcp` timeout (Dask's least, 11 s) closes
a connection with data unacknowledged. The processes' logs are in the test's tmp_path."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ctforge

distributed = pytest.importorskip("distributed", reason="Dask distributed is not installed")
import dask  # noqa: E402

from ctforge import distributed as cd  # noqa: E402

DASK = os.path.join(os.path.dirname(sys.executable), "dask")
SHAPE = (64, 96, 96)  # 64 units of one plane
TIMEOUTS = {"distributed.scheduler.allowed-failures": "10",
            "distributed.scheduler.worker-ttl": "1s",
            "distributed.comm.timeouts.connect": "5s",
            "distributed.comm.timeouts.tcp": "11s"}
ENV = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
           **{"DASK_" + k.upper().replace(".", "__").replace("-", "_"): v
              for k, v in TIMEOUTS.items()})
NAME = f"cf{os.getpid()}"  # the namespace; its veth pair is NAME + "h" / NAME + "n"


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def free_subnet():
    """X of a 10.231.X.0/30 in which no interface has an address."""
    used = sh("ip", "-4", "-o", "addr", "show").stdout
    for i in range(256):
        x = (os.getpid() + i) % 256
        if f" 10.231.{x}." not in used:
            return x
    pytest.skip("no free 10.231.X.0/30 for the test's link")


@pytest.fixture
def link(tmp_path):
    """A network namespace joined to this one by a veth pair: (namespace, host side's address,
    namespace side's address, start). ``start(name, args, ns=None)`` runs the dask command line
    (in the namespace with ns) in a process group of its own. Afterwards the groups are killed
    and the link and the namespace removed, whatever the test's outcome."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace and nftables rules)")
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` is not installed (iproute2 / nftables)")
    if not os.path.exists(DASK):
        pytest.skip(f"the dask command line is not installed ({DASK})")
    r = sh("ip", "netns", "add", NAME)
    if r.returncode != 0:
        pytest.skip(f"`ip netns add` failed: {r.stderr.strip()}")
    host_if, ns_if = NAME + "h", NAME + "n"
    procs = []
    env = dict(ENV, DASK_TEMPORARY_DIRECTORY=str(tmp_path))  # (the workers' scratch space)

    def start(name, args, ns=None):
        prefix = ["ip", "netns", "exec", ns] if ns else []
        with open(tmp_path / f"{name}.log", "w") as log:
            procs.append(subprocess.Popen(prefix + [DASK, *args], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    try:
        r = sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        if r.returncode != 0:
            pytest.skip(f"`ip link add ... type veth` failed: {r.stderr.strip()}")
        r = sh("ip", "netns", "exec", NAME, "nft", "list", "ruleset")
        if r.returncode != 0:
            pytest.skip(f"nftables does not work in a network namespace: {r.stderr.strip()}")
        x = free_subnet()
        host, inside = f"10.231.{x}.1", f"10.231.{x}.2"
        steps = [("ip", "link", "set", ns_if, "netns", NAME),
                 ("ip", "addr", "add", f"{host}/30", "dev", host_if),
                 ("ip", "link", "set", host_if, "up")]
        steps += [("ip", "netns", "exec", NAME, "ip", *step) for step in (
            ("addr", "add", f"{inside}/30", "dev", ns_if), ("link", "set", ns_if, "up"),
            ("link", "set", "lo", "up"))]
        for step in steps:
            r = sh(*step)
            assert r.returncode == 0, f"{' '.join(step)}: {r.stderr}"
        yield NAME, host, inside, start
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(30)
        sh("ip", "link", "del", host_if)  # (both ends of the pair)
        sh("ip", "netns", "del", NAME)


def cut(ns):
    """Every packet into and out of namespace ``ns`` dropped (but on its loopback)."""
    rules = ("table inet ctforge_cut {\n"
             " chain in { type filter hook input priority 0; policy drop; iif lo accept; }\n"
             " chain out { type filter hook output priority 0; policy drop; oif lo accept; }\n"
             "}\n")
    r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"nft: {r.stderr}"


@pytest.fixture
def scan(tmp_path):
    g = ctforge.Geometry.cone(cols=64, rows=48, pixel_size=1.0, sid=200, sdd=400, angles=360)
    path = tmp_path / "p.h5"
    ctforge.write_projections(path, ctforge.project_analytic(ctforge.shepp_logan(40), g), g)
    return path


def recorded(ck):
    try:
        return sum(n.startswith("slab_") and n.endswith(".json") for n in os.listdir(ck))
    except OSError:
        return 0


def poll(condition, seconds, what):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.005)


def test_worker_cut_off_mid_run_completes_identical(link, scan, tmp_path):
    ns, host, inside, start = link
    file = str(tmp_path / "scheduler.json")
    start("scheduler", ["scheduler", "--host", host, "--port", "0", "--no-dashboard",
                        "--scheduler-file", file])
    poll(lambda: os.path.exists(file), 60, "the scheduler's start")
    worker = ["worker", "--scheduler-file", file, "--nworkers", "1", "--nthreads", "1",
              "--no-dashboard", "--host"]
    start("worker-host", worker + [host])
    start("worker-cut", worker + [inside], ns)
    ck, out, units = tmp_path / "ck", tmp_path / "v.h5", SHAPE[0]
    with dask.config.set(TIMEOUTS), distributed.Client(scheduler_file=file) as client:
        client.wait_for_workers(2, timeout=60)
        pids = client.run(os.getpid)
        away = next(a for a in pids if a.startswith(f"tcp://{inside}:"))
        away_name = f"{socket.gethostname()}:{pids[away]}"  # (as the run report names it)
        gathered, result, failure = [], {}, []

        def go():
            try:
                result.update(cd.reconstruct(client, scan, out, shape=SHAPE, unit_planes=1,
                                             threads=1, checkpoint_dir=ck, keep_units=True,
                                             progress=gathered.append))
            except BaseException as e:  # reported below
                failure.append(e)
        t0 = time.time()
        t = threading.Thread(target=go, daemon=True)  # (a hung run fails the test, below)
        t.start()

        # The cut once the namespaced worker holds a result and the client has gathered as many
        # results as there were then (as_completed yields them in the scheduler's order: its
        # among them), so that the report can name it.
        held = {}

        def away_holds():
            held.update(client.has_what())
            return bool(held.get(away)) or not t.is_alive()
        poll(away_holds, 60, "a unit computed on the namespaced worker")
        done = sum(len(keys) for keys in held.values())
        poll(lambda: len(gathered) >= done or not t.is_alive(), 60, "the client gathering it")
        assert t.is_alive() and not failure, f"the run ended before the cut: {failure}"
        at_cut = recorded(ck)
        cut(ns)
        t_cut = time.time()
        poll(lambda: away not in client.nthreads() or not t.is_alive(), 120,
             "the scheduler dropping the cut worker")
        dropped = time.time() - t_cut
        t.join(max(0.0, t0 + 120 - time.time()))
        assert not t.is_alive(), "the run did not complete within 120 s"
        assert not failure, failure
    assert result["units"] == units and recorded(ck) == units
    p, g = ctforge.read_projections(scan)
    one = ctforge.reconstruct(p, g, ctforge.default_grid(g, SHAPE), checkpoint_dir=tmp_path / "one",
                              threads=1, unit_planes=1)
    assert np.array_equal(ctforge.read_volume(out)[0], one)
    report = json.loads((tmp_path / "v.h5.report.json").read_text())
    assert all(u["worker"] is not None for u in report["units"])
    workers = report["totals"]["workers"]
    assert sum(w["units"] for w in workers.values()) == units
    assert workers.get(away_name, {}).get("units", 0) >= 1, \
        f"no unit of the cut worker {away_name} in the report: {sorted(workers)}"
    print(f"[ metric ] network cut: {at_cut} of {units} units recorded at the cut, "
          f"{workers[away_name]['units']} by the cut worker; the scheduler dropped it "
          f"{dropped:.1f} s after the cut; run {result['seconds']:.1f} s")
