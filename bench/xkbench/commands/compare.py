"""compare http1|h2c|https: xKit against its peers in more depth than the suite, one worker
each, a fresh server per run. The plumbing the three share is here: tools, cores, peers,
the certificate, rounds, and where the report goes."""

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..cli import add_commands, check_at_least_one, command_line, say
from ..peers import GO_PEER_FOR, PeerContext, find_peers
from ..prepare import SetupFailed, build_go_peers, check_tools, make_certificate
from ..rounds import run_rounds
from ..servers import PortPicker, RunFailed, pin_self, raise_fd_limit, running

HELP = "xKit against its peers in depth: compare http1, h2c, https, websocket, db, proxy or h3"
COMPARISONS = {
    "http1": "xkbench.commands.compare_http1",
    "h2c": "xkbench.commands.compare_h2c",
    "https": "xkbench.commands.compare_https",
    "websocket": "xkbench.commands.compare_websocket",
    "db": "xkbench.commands.compare_db",
    "proxy": "xkbench.commands.compare_proxy",
    "h3": "xkbench.commands.compare_h3",
}
WARMUP_SECONDS = 1


def add_arguments(parser):
    add_commands(parser, COMPARISONS, "comparison")


@dataclass
class Bench:
    """What a comparison measures with: its options, a private directory, the ports."""

    args: object
    work_dir: Path
    ports: PortPicker

    def run_once(self, peer, label, measure):
        """measure(server) on a fresh server; a run's record, never raises RunFailed."""
        try:
            with running(peer, self.ports, self.work_dir, self.args.server_cpus, label) as server:
                return {"ok": True, **measure(server)}
        except (RunFailed, OSError) as error:
            return {"ok": False, "error": str(error)}

    def rounds(self, plan, measure):
        """run_rounds over plan ({case: [server]}) with measure(case, server) -> record."""
        return run_rounds(self.args.runs, plan, measure)


def prepare_peers(args, work_dir, protocol, tls=False, extra_go=(), static_dir=None):
    """({name: Peer}, {name: why skipped}) for args.servers, one worker each, building the
    Go peer for protocol only and, with tls, sharing one RSA-2048 certificate; with
    static_dir, every peer serves it at /static/."""
    context = PeerContext(build_dir=args.build_dir.resolve(), workers=1, static_dir=static_dir)
    if tls:
        try:
            context.cert, context.key = make_certificate(work_dir)
        except SetupFailed as error:
            context.cert_problem = str(error)
    if "go" in args.servers:
        try:
            context.go_bin = build_go_peers(work_dir / "go", (GO_PEER_FOR[protocol], *extra_go))
        except SetupFailed as error:
            context.go_problem = str(error)
    peers, skipped = find_peers(args.servers, protocol, context)
    for name, reason in skipped.items():
        say(f"skipping {name}: {reason}")
    return peers, skipped


def run_comparison(args, name, tools, measure, fd_limit=None, at_least_one=("runs", "duration")):
    """The frame of the comparisons, of ciphers and of instructions: checks (the options in
    at_least_one must be 1 or more), pins this process to the client's cores, gives
    measure(bench) a private directory, prints the report it returns as (markdown, data)
    and writes it under results/NAME/."""
    check_at_least_one(args, *at_least_one)
    check_tools(tools)
    results.check_writable(args.out_dir)
    pin_self(args.client_cpus)
    if fd_limit:
        raise_fd_limit(fd_limit)
    with tempfile.TemporaryDirectory(prefix=f"xkbench-{name.replace('/', '-')}-") as tmp:
        work_dir = Path(tmp)
        work_dir.chmod(0o711)  # h2o and nginx, no longer root, reach their files through it
        markdown, data = measure(Bench(args, work_dir, PortPicker(args.first_port)))
    print(markdown)
    data = {"command": command_line(args), "config": results.options_record(args), **data}
    _stamp, md_path, json_path = results.write(args.out_dir, name, markdown, data)
    print(f"report: {md_path} and {json_path.name}", file=sys.stderr)
    return 0
