"""Where and with what a load run ran, for its page and run.json: the machine and the versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "python": platform.python_version(), "host": platform.node()}


def _run_text(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ((out.stdout + out.stderr).strip() or None) if out.returncode == 0 else None


def versions() -> dict:
    found = {"gateway commit": _run_text(["git", "describe", "--always", "--dirty"])}
    for package in ("murmur-gateway", "uvloop", "hypercorn", "matplotlib", "rich"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    nginx = _run_text(["nginx", "-v"])
    found["nginx"] = nginx.split("/", 1)[-1] if nginx else None
    found["libnginx-mod-nchan"] = _run_text(["dpkg-query", "-W", "-f", "${Version}", "libnginx-mod-nchan"])
    return found
