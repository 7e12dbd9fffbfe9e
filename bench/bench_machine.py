"""What machine a benchmark ran on (shared by the Python benchmarks in bench/)."""
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
