"""The deployment recipes in deploy/: every Kubernetes document is valid for the Kubernetes
versions stated below (checked offline against the schemas kubernetes-validate bundles, strictly:
an unknown field is an error), the Indexed Job has the settings its comments promise, and the
commands the manifests run use only flags the command lines define (the recipes cannot drift
from the CLI: `ctforge recon --help` of the program at CTFORGE_CLI, the argument parser of
python/ctforge/distributed.py).

Needs only pytest, PyYAML and kubernetes-validate (no compiled ctforge): with the project's
conftest, which imports ctforge, left out it runs in a small environment of its own:
    python3 -m venv .venv-deploy && .venv-deploy/bin/pip install pytest kubernetes-validate
    CTFORGE_CLI=build/apps/ctforge .venv-deploy/bin/python -m pytest --noconftest \
        python/tests/test_deploy.py
"""
import copy
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from kubernetes_validate import utils as kv

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# The Kubernetes versions the recipes are for: 1.30 (backoffLimitPerIndex with the FailIndex
# action and podReplacementPolicy are beta there, on by default since 1.29) and 1.33, where
# backoffLimitPerIndex is GA.
K8S_VERSIONS = ("1.30", "1.33")


def documents():
    """(file name, index in the file, document) of every YAML document in deploy/."""
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                docs.append((path.name, i, doc))
    return docs


def doc_id(item):
    name, i, doc = item
    return f"{name}[{i}]:{doc['kind']}/{doc['metadata']['name']}"


DOCUMENTS = documents()


def indexed_jobs():
    return [d for _, _, d in DOCUMENTS
            if d["kind"] == "Job" and d["spec"].get("completionMode") == "Indexed"]


def container(workload, name=None):
    containers = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def flags(args):
    """The options among a container's args ("--x", "-o"), without the values."""
    return [a.split("=", 1)[0] for a in args if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", a)]


def test_the_kubernetes_versions_are_bundled():
    # validate() silently takes the newest schema not newer than the one asked for: a version
    # dropped from the package would be checked against an older one.
    bundled = {kv.major_minor(v) for v in kv.all_versions()}
    assert set(K8S_VERSIONS) <= bundled, sorted(bundled)


def test_deploy_holds_the_recipes():
    kinds = sorted((name, d["kind"]) for name, _, d in DOCUMENTS)
    assert ("pvc.yaml", "PersistentVolumeClaim") in kinds
    assert len(indexed_jobs()) >= 2  # whole GPUs and MIG slices
    assert {"Deployment", "Service", "Job"} <= {k for n, k in kinds if n == "dask-cluster.yaml"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("item", DOCUMENTS, ids=doc_id)
def test_every_document_is_valid(item, version):
    kv.validate(item[2], version, strict=True)


@pytest.mark.parametrize("path, misspelt", [
    (("spec", "completionMode"), "completionmode"),
    (("spec", "template", "spec", "terminationGracePeriodSeconds"),
     "terminationGracePeriodSecond"),
])
def test_a_misspelt_field_is_rejected(path, misspelt):
    """Negative control: the strict schemas refuse a field they do not know."""
    job = copy.deepcopy(indexed_jobs()[0])
    parent = job
    for key in path[:-1]:
        parent = parent[key]
    parent[misspelt] = parent.pop(path[-1])
    with pytest.raises(kv.ValidationError) as e:
        kv.validate(job, K8S_VERSIONS[0], strict=True)
    assert misspelt in str(e.value)


@pytest.mark.parametrize("job", indexed_jobs(), ids=lambda j: j["metadata"]["name"])
def test_indexed_job_runs_the_shares_of_one_run(job):
    spec = job["spec"]
    pod = spec["template"]["spec"]
    c = container(job)
    args = c["args"]
    assert args[:2] == ["ctforge", "recon"]
    share = args[args.index("--unit-share") + 1]
    m = re.fullmatch(r"\$\(JOB_COMPLETION_INDEX\)/(\d+)", share)
    assert m, share
    n = int(m.group(1))
    assert spec["completions"] == spec["parallelism"] == n
    assert "--checkpoint-dir" in args
    # Retries per share; disruptions (spot preemption) ignored; usage errors fail the index.
    assert spec["backoffLimitPerIndex"] >= 1
    assert pod["restartPolicy"] == "Never"
    rules = spec["podFailurePolicy"]["rules"]
    assert any(r["action"] == "Ignore" and
               {"type": "DisruptionTarget", "status": "True"} in r.get("onPodConditions", [])
               for r in rules)
    assert any(r["action"] == "FailIndex" and r["onExitCodes"]["operator"] == "In" and
               r["onExitCodes"]["values"] == [2] and r["onExitCodes"]["containerName"] == c["name"]
               for r in rules)
    # The spot notice; ctforge stops at its next batch on SIGTERM.
    assert pod["terminationGracePeriodSeconds"] == 30
    # One GPU or one MIG slice per share.
    gpus = {k: v for k, v in c["resources"]["limits"].items() if k.startswith("nvidia.com/")}
    assert list(gpus.values()) == [1], gpus
    assert re.fullmatch(r"nvidia\.com/(gpu|mig-\d+g\.\d+gb)", next(iter(gpus))), gpus


@pytest.mark.parametrize("name", ["recon-job.yaml", "recon-job-mig.yaml", "dask-cluster.yaml"])
def test_pods_share_one_read_write_many_claim(name):
    claims = {d["metadata"]["name"]: d for _, _, d in DOCUMENTS
              if d["kind"] == "PersistentVolumeClaim"}
    for _, _, d in (x for x in DOCUMENTS if x[0] == name):
        if d["kind"] not in ("Job", "Deployment"):
            continue
        pod = d["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            for mount in c.get("volumeMounts", []):
                claim = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
                assert "ReadWriteMany" in claims[claim]["spec"]["accessModes"]
            # Every path the command names lies on the shared volume.
            mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
            for a in c["args"]:
                if a.startswith("/"):
                    assert any(a.startswith(m + "/") for m in mounts), (d["metadata"]["name"], a)


def cli_path():
    path = pathlib.Path(os.environ.get("CTFORGE_CLI", ROOT / "build" / "apps" / "ctforge"))
    if not path.exists():
        pytest.skip(f"the ctforge command line is not built ({path}); set CTFORGE_CLI")
    return path


@pytest.mark.parametrize("job", indexed_jobs(), ids=lambda j: j["metadata"]["name"])
def test_indexed_job_uses_the_flags_of_ctforge_recon(job):
    help_text = subprocess.run([str(cli_path()), "recon", "--help"], capture_output=True,
                               text=True, check=True).stdout
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))
    used = flags(container(job)["args"][2:])
    assert "--unit-share" in used
    assert set(used) <= known, sorted(set(used) - known)


def distributed_flags():
    """The options python/ctforge/distributed.py's argument parser defines."""
    source = (ROOT / "python" / "ctforge" / "distributed.py").read_text()
    found = set()
    for call in re.findall(r"add_argument\(((?:\s*\"[^\"]*\",)+)", source):
        found.update(f for f in re.findall(r"\"(-[^\"]*)\"", call))
    return found


def test_dask_recipe_uses_the_flags_of_ctforge_distributed():
    docs = {d["metadata"]["name"]: d for n, _, d in DOCUMENTS if n == "dask-cluster.yaml"}
    client = container(docs["ctforge-dask-recon"])
    args = client["args"]
    assert args[:4] == ["python", "-m", "ctforge.distributed", "recon"]
    used = flags(args[4:])
    known = distributed_flags()
    assert {"--scheduler", "--checkpoint-dir", "-o"} <= known  # the parser was read
    assert set(used) <= known, sorted(set(used) - known)
    # Client and workers reach the scheduler through its Service.
    service = docs["ctforge-dask-scheduler"]
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "comm")
    address = f"tcp://{service['metadata']['name']}:{port}"
    assert args[args.index("--scheduler") + 1] == address
    worker = container(docs["ctforge-dask-worker"])
    assert worker["args"][:3] == ["dask", "worker", address]
    assert {"--lifetime", "--lifetime-stagger"} <= set(flags(worker["args"]))


def test_dask_commands_use_flags_dask_knows():
    """Where the dask command line is installed: `dask scheduler` / `dask worker` list every
    option the Deployments pass."""
    dask = shutil.which("dask") or shutil.which("dask", path=os.path.dirname(sys.executable))
    if dask is None:
        pytest.skip("the dask command line is not installed here")
    for name, _, d in DOCUMENTS:
        if name != "dask-cluster.yaml" or d["kind"] != "Deployment":
            continue
        args = container(d)["args"]
        assert args[0] == "dask"
        help_text = subprocess.run([dask, args[1], "--help"], capture_output=True, text=True,
                                   check=True).stdout
        for flag in flags(args[2:]):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (args[1], flag)
