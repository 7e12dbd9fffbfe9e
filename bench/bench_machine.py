"""What machine a benchmark ran on, and writing its report (shared by the Python benchmarks in
bench/)."""
import json
import os
import platform


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform module reports."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_json(path: str, report: dict) -> None:
    """Writes `report` as indented JSON to `path`, making its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
