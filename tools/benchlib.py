"""Helpers shared by the benchmark scripts in tools/ (tools only): the median, the CPU's
name, and subprocess runs that capture their output."""
import platform
import subprocess


def med(v):
    """The median of a non-empty sequence (the mean of the middle two for an even count)."""
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def cpu_model():
    """The CPU's model name as /proc/cpuinfo gives it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def sh(cmd, **kw):
    """Run cmd, capturing stdout and stderr as text."""
    return subprocess.run(cmd, capture_output=True, text=True, **kw)
