"""The Test Environment table: the machine, the cores each side used, the tools' versions."""

import os
import platform
import re
import subprocess
from pathlib import Path

from .paths import REPO_ROOT
from .servers import cpu_list, find_tool


def first_line(argv, pattern=None):
    """The first line a command prints (stdout, else stderr), or the first match of pattern
    in it; "not found" when it cannot run. Some tools (wrk -v) exit non-zero after a version."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = done.stdout.strip() or done.stderr.strip()
    if pattern:
        match = re.search(pattern, text)
        return match.group(1) if match else "unknown"
    return text.splitlines()[0] if text else "unknown"


def cpu_model():
    with open("/proc/cpuinfo") as cpuinfo:
        return next(
            (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
            platform.processor() or "unknown CPU",
        )


def memory():
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    return "unknown"


def os_name():
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "unknown"
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return match.group(1) if match else "unknown"


def aes_ni():
    with open("/proc/cpuinfo") as cpuinfo:
        return any(line.startswith("flags") and " aes " in f"{line} " for line in cpuinfo)


def host_line(with_aes=False):
    """One line for a comparison's report: the cores, the kernel, the load at the start."""
    aes = f" ({'AES-NI' if aes_ni() else 'no AES-NI'})" if with_aes else ""
    return f"{os.cpu_count()} × {cpu_model()}{aes}, Linux {platform.release()}, load {load_average()} at start"


def load_average():
    with open("/proc/loadavg") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def cmake_cache(build_dir):
    """CMakeCache.txt's entries as {name: value}, or {} without one."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text()
    except OSError:
        return {}
    return dict(re.findall(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", text, re.M))


def compiler(cache):
    cc = cache.get("CMAKE_C_COMPILER") or "cc"
    build = cache.get("CMAKE_BUILD_TYPE") or "unknown build type"
    if cache.get("XK_ENABLE_SANITIZERS", "OFF").upper() in ("ON", "TRUE", "1"):
        build += ", with sanitizers"
    return f"{first_line([cc, '--version'])} ({build})"


def xkit_revision():
    commit = first_line(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    if not re.fullmatch(r"[0-9a-f]{4,40}", commit):
        return "unknown revision"
    dirty = first_line(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return f"commit {commit}" + (" with uncommitted changes" if dirty not in ("unknown", "") else "")


def capture(build_dir, server_cpus, client_cpus, peers):
    """The Test Environment as an ordered {label: value}."""
    cache = cmake_cache(build_dir)
    workers = len(server_cpus)
    per_server = [f"xKit --workers {workers}", f"Go GOMAXPROCS={workers}"]
    if "nginx" in peers:
        per_server.append(f"nginx worker_processes {workers}")
    if "h2o" in peers:
        per_server.append(f"h2o num-threads {workers}")
    threads = len(client_cpus)
    go = find_tool("go", "/usr/local/go/bin/go") or "go"
    environment = {
        "CPU": f"{cpu_model()} ({os.cpu_count()} cores online)",
        "Server cores": f"CPU {cpu_list(server_cpus)}: {workers} per server ({', '.join(per_server)})",
        "Client cores": f"CPU {cpu_list(client_cpus)}: wrk -t{threads}, h2load -t{threads}",
        "Memory": memory(),
        "Kernel": f"Linux {platform.release()} ({platform.machine()})",
        "OS": os_name(),
        "Compiler": compiler(cache),
        "xKit": xkit_revision(),
        "OpenSSL": first_line(["openssl", "version"]),
        "wrk": first_line(["wrk", "-v"], r"^(wrk \S+)"),
        "h2load": first_line(["h2load", "--version"]),
        "Go": first_line([go, "version"], r"go version (\S+ \S+)"),
        "Python": platform.python_version(),
    }
    if "nginx" in peers:
        environment["nginx"] = first_line(
            [find_tool("nginx", "/usr/sbin/nginx") or "nginx", "-v"], r"nginx version: (\S+)"
        )
    if "h2o" in peers:
        environment["h2o"] = first_line([find_tool("h2o", "/usr/sbin/h2o") or "h2o", "--version"])
    environment["Load average at start"] = load_average()
    return environment
