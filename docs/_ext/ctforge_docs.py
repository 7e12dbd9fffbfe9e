"""Pages of the ctforge documentation that are made at build time, not committed.

* The command-line reference: ``ctforge --help`` and ``ctforge SUBCOMMAND --help`` of the
  built binary (``$CTFORGE_CLI``, else ``build/apps/ctforge``, else ``build-cpu/apps/ctforge``),
  one Markdown page each in ``docs/_generated/cli/``.
* The example notebook ``examples/quickstart.ipynb``, executed with nbclient (in ``examples/``,
  where its relative paths point) into ``docs/_generated/quickstart.ipynb``, which myst-nb
  renders with its outputs.
* Doxygen XML of the public headers (``docs/Doxyfile``) in ``<build dir>/doxygen/xml``, read by
  breathe for the C++ API page.

Everything is made once per ``sphinx-build`` run, at ``config-inited`` (before Sphinx looks for
source files); a missing binary, a failing notebook or a failing doxygen stops the build.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

DOCS = pathlib.Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"


def _cli() -> pathlib.Path:
    env = os.environ.get("CTFORGE_CLI")
    candidates = [pathlib.Path(env)] if env else [ROOT / "build/apps/ctforge",
                                                  ROOT / "build-cpu/apps/ctforge"]
    for c in candidates:
        c = c if c.is_absolute() else ROOT / c
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ExtensionError("ctforge_docs: no ctforge binary for the command-line reference (looked "
                         "for " + ", ".join(str(c) for c in candidates) + "); build it with "
                         "`make build` or set CTFORGE_CLI")


def _help(cli: pathlib.Path, *args: str) -> str:
    run = subprocess.run([str(cli), *args, "--help"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "100"})
    if run.returncode != 0:
        raise ExtensionError(f"ctforge_docs: `ctforge {' '.join(args)} --help` exited "
                             f"{run.returncode}: {run.stderr.strip()}")
    return run.stdout.rstrip() + "\n"


def _subcommands(top_help: str) -> list[str]:
    """Names listed under "Subcommands:" in the top-level help (CLI11's layout)."""
    names, inside = [], False
    for line in top_help.splitlines():
        if line.strip().lower().startswith("subcommands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^\s{2}(\S+)\s", line + " ")
            if m:
                names.append(m.group(1))
            elif line.strip() and not line.startswith(" "):
                break
    if not names:
        raise ExtensionError("ctforge_docs: no subcommands found in `ctforge --help`")
    return names


def _fence(text: str) -> str:
    return "````text\n" + text + "````\n"


def _write(path: pathlib.Path, text: str) -> None:
    """Writes only when the text changed, so that Sphinx does not re-read unchanged pages."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def generate_cli_reference(outdir: pathlib.Path = GENERATED / "cli") -> None:
    cli = _cli()
    top = _help(cli)
    subs = _subcommands(top)
    version = subprocess.run([str(cli), "--version"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    pages = {"ctforge": "# `ctforge`\n\n"
             f"The top-level help of the command line ({version}): `ctforge --help`.\n\n"
             + _fence(top)}
    for sub in subs:
        pages[sub] = (f"# `ctforge {sub}`\n\n`ctforge {sub} --help`:\n\n" + _fence(_help(cli, sub)))
    for stale in outdir.glob("*.md") if outdir.exists() else []:
        if stale.stem not in pages:
            stale.unlink()
    for name, text in pages.items():
        _write(outdir / f"{name}.md", text)
    logger.info(f"ctforge_docs: command-line reference from {cli} ({len(subs)} subcommands)")


def execute_notebook(src: pathlib.Path = ROOT / "examples/quickstart.ipynb",
                     dst: pathlib.Path = GENERATED / "quickstart.ipynb") -> None:
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime and \
            os.environ.get("CTFORGE_DOCS_RERUN_NOTEBOOK", "") == "":
        logger.info(f"ctforge_docs: {dst.name} is up to date (CTFORGE_DOCS_RERUN_NOTEBOOK=1 "
                    "runs it again)")
        return
    import nbclient
    import nbformat
    nb = nbformat.read(src, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(src.parent)}})
    try:
        client.execute()
    except Exception as e:  # a failing cell: the build fails with the cell's error
        raise ExtensionError(f"ctforge_docs: {src.relative_to(ROOT)} failed: {e}") from e
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(".part")
    nbformat.write(nb, tmp)
    tmp.replace(dst)
    logger.info(f"ctforge_docs: executed {src.relative_to(ROOT)} into {dst.relative_to(ROOT)}")


def run_doxygen(outdir: pathlib.Path) -> pathlib.Path:
    doxygen = shutil.which("doxygen")
    if doxygen is None:
        raise ExtensionError("ctforge_docs: doxygen not found (scripts/install-deps installs it)")
    outdir.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([doxygen, str(DOCS / "Doxyfile")], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "CTFORGE_DOXYGEN_OUT": str(outdir)})
    if run.returncode != 0:
        raise ExtensionError(f"ctforge_docs: doxygen exited {run.returncode}: {run.stderr}")
    return outdir / "xml"


def _config_inited(app, config) -> None:
    generate_cli_reference()
    execute_notebook()
    xml = run_doxygen(pathlib.Path(app.outdir).parent / "doxygen")
    config.breathe_projects = {"ctforge": str(xml)}
    config.breathe_default_project = "ctforge"


def setup(app):
    app.connect("config-inited", _config_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # python docs/_ext/ctforge_docs.py: the CLI pages alone
    generate_cli_reference()
    sys.exit(0)
