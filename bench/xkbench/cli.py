"""python3 bench/xkbench SUBCOMMAND ...: the table of subcommands, and the options and
messages they share. Each subcommand is a module with HELP, add_arguments(parser) and
run(args) -> exit status."""

import argparse
import os
import shlex
import signal
import sys
from importlib import import_module
from pathlib import Path

from .paths import DEFAULT_BUILD_DIR, RESULTS_DIR
from .servers import parse_cpu_list

# A new measurement (static files, WebSocket) is a module in commands/
# and one line here; its reports go to results/<its name>/.
COMMANDS = {
    "suite": "xkbench.commands.suite",
    "compare": "xkbench.commands.compare",
    "ciphers": "xkbench.commands.ciphers",
    "instructions": "xkbench.commands.instructions",
    "compress": "xkbench.commands.compress",
    "arena": "xkbench.commands.arena",
    "static": "xkbench.commands.static",
    "soak": "xkbench.commands.soak",
}


def say(line):
    print(line, file=sys.stderr, flush=True)


def name_list(choices, allow_empty=False):
    """An argparse type for "a,b" out of choices, kept in the choices' order; "none" is no name."""

    def parse(text):
        names = [name.strip() for name in text.split(",") if name.strip() and name.strip() != "none"]
        unknown = [name for name in names if name not in choices]
        if unknown or (not names and not allow_empty):
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return [name for name in choices if name in names]

    return parse


def cpu_set(text):
    """An argparse type for a taskset list such as 1 or 2-3,5."""
    try:
        return parse_cpu_list(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a taskset list such as 1 or 2-3,5") from None


def add_common_options(
    parser,
    *,
    runs=3,
    duration=5,
    first_port,
    server_cpus="1",
    client_cpus="0",
    duration_help="seconds per measured run",
    cpus_help="",
    servers=None,
    cases=None,
    with_duration=True,
):
    """The options every subcommand has: the build, where reports go, runs, duration (unless
    not with_duration), the cores of each side, the first port; and --servers and --cases
    where given as (choices, default)."""
    if servers:
        parser.add_argument(
            "--servers", type=name_list(servers[0]), default=list(servers[1]), help=",".join(servers[0])
        )
    if cases:
        parser.add_argument("--cases", type=name_list(cases[0]), default=list(cases[1]), help=",".join(cases[0]))
    parser.add_argument("--runs", type=int, default=runs, help="rounds over every server (default 3)")
    if with_duration:
        parser.add_argument("--duration", type=int, default=duration, help=duration_help)
    parser.add_argument(
        "--server-cpus",
        type=cpu_set,
        default=server_cpus and parse_cpu_list(server_cpus),
        help="taskset list for the servers " + (cpus_help or f"(default {server_cpus})"),
    )
    parser.add_argument(
        "--client-cpus",
        type=cpu_set,
        default=client_cpus and parse_cpu_list(client_cpus),
        help="taskset list for the load generator and this process " + (cpus_help or f"(default {client_cpus})"),
    )
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=DEFAULT_BUILD_DIR,
        help="xKit's build, with bench/http_bench_server and the others",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where reports go (default bench/results)")
    parser.add_argument("--first-port", type=int, default=first_port)


def check_at_least_one(args, *names):
    """runs, duration and the like must be at least 1."""
    low = [name for name in names if getattr(args, name) < 1]
    if low:
        args.parser.error(", ".join("--" + name.replace("_", "-") for name in low) + " must be at least 1")


def check_cpus_available(args):
    allowed = os.sched_getaffinity(0)
    if not (args.server_cpus | args.client_cpus) <= allowed:
        args.parser.error(
            f"CPUs {sorted((args.server_cpus | args.client_cpus) - allowed)} are not "
            f"available here (available: {sorted(allowed)})"
        )


def command_line(args):
    """How this run was asked for, as the reports show it."""
    return shlex.join(["python3", "bench/xkbench"] + args.argv)


def add_commands(parser, table, dest):
    """Subparsers from a table of {name: module path}; each module adds its own options."""
    subparsers = parser.add_subparsers(dest=dest, required=True, metavar="{" + ",".join(table) + "}")
    for name, path in table.items():
        module = import_module(path)
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        if hasattr(module, "run"):
            sub.set_defaults(run=module.run, parser=sub)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python3 bench/xkbench",
        description="xKit's benchmarks: servers pinned apart from the load generator, rounds, "
        "medians, CPU per request from /proc, reports under bench/results/.",
    )
    add_commands(parser, COMMANDS, "command")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    return args.run(args)
