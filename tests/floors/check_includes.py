#!/usr/bin/env python3
"""Checks the include graph of the floors (docs/architecture.md, "The floors").

Reads every #include of src/, apps/, python/src/ and include/ctforge/ under --root and reports,
as "file:line: #include ...: reason", each include that
  * runs from a floor of src/ to one above it, or across between io and cuda;
  * brings src/recon or src/io into CUDA code (.cu, .cuh);
  * brings anything of src/ into a public header (include/ctforge/), or names a CUDA, ITK or
    HDF5 header there;
  * brings anything of src/ into the Python module (python/src/).
Exits 1 when there is one, 0 otherwise. --expect FILE:LINE (repeatable): instead, exit 0 only
when the check fails and reports exactly those places (the negative control on a fixture).
"""
import argparse
import pathlib
import re
import sys

# What each floor of src/ may include (its own directory and those below it).
ALLOWED = {
    "math": {"math"},
    "core": {"math", "core"},
    "cuda": {"math", "core", "cuda"},
    "io": {"math", "core", "io"},
    "preprocess": {"math", "core", "preprocess"},
    "recon": {"math", "core", "cuda", "io", "preprocess", "recon"},
}
FLOORS = set(ALLOWED)
SOURCE_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
# Headers of the private dependencies no public header may name.
PRIVATE_HEADER = re.compile(r"^(cuda[a-z_]*\.h|cufft\.h|cublas.*|thrust/.*|cub/.*|itk.*|gdcm.*|"
                            r"hdf5.*\.h|H5.*\.h)$")


def first_dir(path):
    parts = path.split("/")
    return parts[0] if len(parts) > 1 else None


def check_file(root, f):
    rel = f.relative_to(root).as_posix()
    parts = rel.split("/")
    cuda_code = f.suffix in {".cu", ".cuh"}
    problems = []
    for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        quoted, target = m.group(1) == '"', m.group(2)
        top = first_dir(target) if quoted else None
        where = f'{rel}:{n}: #include {m.group(1)}{target}{">" if not quoted else chr(34)}'
        if quoted and cuda_code and top in {"recon", "io"}:
            problems.append(f"{where}: CUDA code must not include src/{top}")
        elif parts[0] == "src" and len(parts) > 2 and parts[1] in FLOORS:
            floor = parts[1]
            if quoted and floor == "math" and top != "math" and (top or "/" in target):
                problems.append(f"{where}: src/math includes only the standard library and "
                                f"src/math")
            elif quoted and top in FLOORS and top not in ALLOWED[floor]:
                problems.append(f"{where}: floor {floor} must not include src/{top} "
                                f"(above or beside it)")
        elif parts[:2] == ["include", "ctforge"]:
            if quoted and top in FLOORS:
                problems.append(f"{where}: a public header must not include src/{top}")
            elif PRIVATE_HEADER.match(target):
                problems.append(f"{where}: a public header must not name CUDA, ITK or HDF5 "
                                f"headers")
        elif parts[:2] == ["python", "src"] and quoted and top in FLOORS:
            problems.append(f"{where}: the Python module uses the public headers only, not "
                            f"src/{top}")
    return problems


def check_tree(root):
    problems = []
    for sub in ("src", "apps", "python/src", "include/ctforge"):
        base = root / sub
        if not base.is_dir():
            continue
        for f in sorted(base.rglob("*")):
            if f.is_file() and f.suffix in SOURCE_SUFFIXES:
                problems += check_file(root, f)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, type=pathlib.Path)
    ap.add_argument("--expect", action="append", default=[], metavar="FILE:LINE")
    args = ap.parse_args()
    root = args.root.resolve()
    if not (root / "src").is_dir():
        print(f"{root}: no src/ directory", file=sys.stderr)
        return 2
    problems = check_tree(root)
    for p in problems:
        print(p)
    if args.expect:
        found = sorted(":".join(p.split(":")[:2]) for p in problems)
        if found != sorted(args.expect):
            print(f"expected the check to report exactly {sorted(args.expect)}, got {found}",
                  file=sys.stderr)
            return 1
        print(f"the check fails as expected ({len(problems)} bad include(s))")
        return 0
    if problems:
        print(f"{len(problems)} include(s) cross the floors (docs/architecture.md)",
              file=sys.stderr)
        return 1
    print(f"include graph: no crossing under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
