"""ciphers: what each TLS cipher suite and certificate type costs xKit's HTTPS server.

Every TLS 1.3 suite with an RSA-2048 and an ECDSA P-256 certificate, and the TLS 1.2 ECDHE
suites with the certificate each needs, against https_bench_server with one worker pinned to
--server-cpus while the load generator runs pinned to --client-cpus. Cases:
  h1         HTTPS/1.1 keep-alive: wrk -t1 -c100, GET /ping
  h2         HTTPS/2: h2load -t1 -c100 -m10, GET /ping
  handshake  a full handshake per request: wrk -t1 -c50 -H "Connection: close", GET /ping,
             against a server started with --no-tickets --session-cache 0
  resume     the same against a server with its default tickets and cache: wrk keeps each
             connection's session when it reconnects (SSL_clear), so every handshake after
             a connection's first is a resumption (TLS 1.3: PSK with a fresh X25519 exchange,
             and new tickets; TLS 1.2: abbreviated)
Before the handshake and resume runs on xKit, a short wrk run against GET /tls counts the
answers that say "resumed": none may for handshake, nearly all must for resume.
The suite is fixed at both ends: the server by --ciphersuites / --ciphers / --tls-max, the
client by h2load's --tls13-ciphers / --ciphers or, for wrk, which has no such option, by an
OpenSSL configuration in OPENSSL_CONF. Before each server's runs `openssl s_client` under
that configuration must negotiate the suite and certificate expected, and h2load's own report
of the cipher must name it. Server CPU per request is utime+stime from /proc/PID/stat across
the run. Each round visits every configuration in turn (the servers' order reversed every
other round) and the median of --runs rounds is reported.
--servers go adds Go's crypto/tls peer (bench/peers/go/https_bench_server), which cannot be told a
suite: for it only the client's offer picks one. It has no /tls, cannot switch resumption off
(no full-handshake case) and h2load cannot offer TLS 1.2 alone (no TLS 1.2 HTTPS/2 case).
"""

import dataclasses
from dataclasses import asdict, dataclass

from .. import environment
from ..cli import add_common_options, name_list
from ..loadgen import RESUMPTION_SCRIPT, h2load_argv, measured_load, unmeasured_load, wrk_argv
from ..parsing import parse_resumption
from ..peers import Missing, PeerContext, make_peer
from ..prepare import SetupFailed, build_go_peers, make_certificate
from ..probes import negotiated
from ..rounds import failure_lines, runs_cell
from ..servers import RunFailed
from ..stats import spread_of
from .compare import WARMUP_SECONDS, run_comparison

HELP = "what each TLS cipher suite and certificate type costs xKit's HTTPS server (and Go's)"
CASES = ("h1", "h2", "handshake", "resume")
SERVERS = ("xkit", "go")
CERTS = ("rsa", "ecdsa")
# The share of /tls answers that must say "resumed" in the resume case's check: each
# connection's first handshake is a full one.
MIN_RESUMED_SHARE = 0.8


@dataclass(frozen=True)
class Config:
    """One suite with one certificate type."""

    version: str  # "1.3" or "1.2"
    suite: str  # OpenSSL's name
    cert: str  # "rsa" or "ecdsa"

    @property
    def label(self):
        return f"TLS {self.version} {self.suite} {self.cert}"


TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
TLS12_SUITES = {
    "rsa": ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"),
    "ecdsa": ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"),
}


def all_configs(certs):
    configs = [Config("1.3", suite, cert) for suite in TLS13_SUITES for cert in certs]
    configs += [Config("1.2", suite, cert) for cert in certs for suite in TLS12_SUITES[cert]]
    return configs


def not_applicable(server, config, case):
    """Why a case cannot be measured on a server, or None."""
    if server != "go":
        return None
    if case == "handshake":
        return "Go's peer keeps session tickets on and wrk resumes: no full-handshake case"
    if case == "h2" and config.version == "1.2":
        return "h2load always offers TLS 1.3 and Go's peer cannot be held to 1.2"
    return None


def add_arguments(parser):
    all_suites = TLS13_SUITES + TLS12_SUITES["rsa"] + TLS12_SUITES["ecdsa"]
    add_common_options(parser, first_port=23000, servers=(SERVERS, ["xkit"]), cases=(CASES, CASES))
    parser.add_argument("--certs", type=name_list(CERTS), default=list(CERTS))
    parser.add_argument(
        "--suites",
        type=name_list(all_suites),
        default=list(all_suites),
        help="OpenSSL names, comma separated (default: all)",
    )
    parser.add_argument("--connections", type=int, default=100, help="keep-alive connections (h1, h2)")
    parser.add_argument("--streams", type=int, default=10, help="h2load -m")
    parser.add_argument("--handshake-connections", type=int, default=50, help="wrk connections in the handshake case")


# --- setup ----------------------------------------------------------------------


def client_openssl_conf(config, work_dir):
    """An OpenSSL configuration that makes any OpenSSL client (wrk, s_client) offer only the
    config's version and suite; the client finds it through OPENSSL_CONF."""
    path = work_dir / f"client-{config.version}-{config.suite}.cnf"
    protocol = f"TLSv{config.version}"
    lines = [
        "openssl_conf = openssl_init",
        "[openssl_init]",
        "ssl_conf = ssl_sect",
        "[ssl_sect]",
        "system_default = system_default_sect",
        "[system_default_sect]",
        f"MinProtocol = {protocol}",
        f"MaxProtocol = {protocol}",
    ]
    lines.append(f"Ciphersuites = {config.suite}" if config.version == "1.3" else f"CipherString = {config.suite}")
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare_peers(args, work_dir, certs):
    """({(server, cert): Peer}, {server: why skipped}): xKit's and Go's HTTPS peers, one worker,
    one per certificate type."""
    go_bin, go_problem = None, None
    if "go" in args.servers:
        try:
            go_bin = build_go_peers(work_dir / "go", ("https_bench_server",))
        except SetupFailed as error:
            go_problem = str(error)
    peers, skipped = {}, {}
    for cert, (cert_path, key_path) in certs.items():
        context = PeerContext(
            build_dir=args.build_dir.resolve(),
            workers=1,
            cert=cert_path,
            key=key_path,
            go_bin=go_bin,
            go_problem=go_problem or "the Go peers were not built",
        )
        for name in args.servers:
            peer = make_peer(name, "https1", context)
            if isinstance(peer, Missing):
                skipped[name] = peer.reason
            else:
                peers[name, cert] = peer
    return peers, skipped


def configured(peer, config, case):
    """xKit's peer held to the config's version and suite, resumption off for the handshake
    case, with GET /tls for the handshake cases' check; Go's cannot be told a suite: only
    the client's offer picks one."""
    if peer.name != "xkit":
        return peer
    flags = (
        ["--tls-min", "1.3", "--ciphersuites", config.suite]
        if config.version == "1.3"
        else ["--tls-max", "1.2", "--ciphers", config.suite]
    )
    if case == "handshake":
        flags += ["--no-tickets", "--session-cache", "0"]
    if case in ("handshake", "resume"):
        flags.append("--test-routes")  # the resumption check asks GET /tls
    return dataclasses.replace(peer, command=lambda port, run_dir: peer.command(port, run_dir) + flags)


def check_negotiation(port, config, client_conf):
    """s_client under the client configuration wrk gets must land on the config's version,
    suite and certificate type."""
    found = negotiated(port, env={"OPENSSL_CONF": str(client_conf)})
    if not found["cipher"]:
        raise RunFailed(f"s_client could not connect: {found['error']}")
    if (found["version"], found["cipher"]) != (f"TLSv{config.version}", config.suite):
        raise RunFailed(f"s_client negotiated {found['version']} {found['cipher']}, not {config.label}")
    expected_bits = "2048" if config.cert == "rsa" else "256"
    if found["key_bits"] != expected_bits:
        raise RunFailed(f"server key is not the {config.cert} one: {found['key_bits']} bits")


# --- load generators ------------------------------------------------------------


def wrk(port, seconds, connections, close, path="/ping", script=None):
    options = (["-H", "Connection: close"] if close else []) + (["-s", str(script)] if script else [])
    return wrk_argv(f"https://127.0.0.1:{port}{path}", connections, seconds, options=options)


def check_resumption(port, case, args, env):
    """wrk against GET /tls with Connection: close, counting the answers that say they came
    over a resumed session: none may in the handshake case, most must in the resume case."""
    _result, run = unmeasured_load(
        wrk(port, WARMUP_SECONDS, args.handshake_connections, True, "/tls", RESUMPTION_SCRIPT),
        args.client_cpus,
        WARMUP_SECONDS,
        env,
    )
    tally = parse_resumption(run.output)
    if not tally or tally[1] == 0:
        raise RunFailed("the resumption check counted no /tls answers")
    resumed, total = tally
    if case == "handshake" and resumed:
        raise RunFailed(f"{resumed} of {total} handshakes were resumed with resumption off")
    if case == "resume" and resumed / total < MIN_RESUMED_SHARE:
        raise RunFailed(f"only {resumed} of {total} handshakes were resumed")
    return resumed / total


def load_argv(case, port, seconds, config, args):
    if case == "h2":
        # For TLS 1.2 h2load still offers TLS 1.3 too: the server's --tls-max 1.2 settles it.
        suite_flag = "--tls13-ciphers" if config.version == "1.3" else "--ciphers"
        return h2load_argv(
            f"https://127.0.0.1:{port}/ping",
            args.connections,
            seconds,
            streams=args.streams,
            options=[f"{suite_flag}={config.suite}"],
        )
    if case == "h1":
        return wrk(port, seconds, args.connections, close=False)
    return wrk(port, seconds, args.handshake_connections, close=True)


def check_h2load_tls(result, config):
    if result.tls is None:
        raise RunFailed("h2load did not report the TLS protocol, cipher and ALPN")
    if result.tls != (f"TLSv{config.version}", config.suite, "h2"):
        raise RunFailed(f"h2load negotiated {' '.join(map(str, result.tls))}, not {config.label} over h2")


def measure_case(server, case, config, args, client_conf):
    """A warm-up run (for xKit's handshake cases, the resumption check), then the measured
    one with the server's and the client's CPU time over the whole run."""
    check_negotiation(server.port, config, client_conf)
    env = {"OPENSSL_CONF": str(client_conf)} if case != "h2" else None
    resumed_share = None
    if server.peer.name == "xkit" and case in ("handshake", "resume"):
        resumed_share = check_resumption(server.port, case, args, env)
    else:
        unmeasured_load(
            load_argv(case, server.port, WARMUP_SECONDS, config, args), args.client_cpus, WARMUP_SECONDS, env
        )
    result, run = measured_load(
        load_argv(case, server.port, args.duration, config, args),
        args.client_cpus,
        args.duration,
        server,
        env,
        h2load_window=False,
    )
    if case == "h2":
        check_h2load_tls(result, config)
    return {
        "requests": result.requests,
        "req_per_s": result.req_per_s,
        **run.per_request(result.requests),
        "resumed_share_checked": resumed_share,
    }


# --- report ---------------------------------------------------------------------


def summarize(results):
    keys = ("req_per_s", "cpu_us_per_request", "server_busy", "client_busy")
    return {
        server: {
            label: {case: {key: spread_of(runs, key) for key in keys} for case, runs in cases.items()}
            for label, cases in by_config.items()
        }
        for server, by_config in results.items()
    }


CASE_HEADINGS = {
    "h1": ("HTTPS/1.1 req/s", "µs/req"),
    "h2": ("HTTPS/2 req/s", "µs/req"),
    "handshake": ("full handshakes/s", "µs/handshake"),
    "resume": ("resumed handshakes/s", "µs/handshake"),
}


def cell(stats, key, fmt):
    return fmt.format(stats[key]["median"]) if stats.get(key) else "–"


def main_table(configs, summary, args):
    headings = ["Server", "TLS", "Suite", "Cert"]
    for case in args.cases:
        headings += CASE_HEADINGS[case]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * 4 + "---:|" * (2 * len(args.cases))]
    for server, by_config in summary.items():
        for config in configs:
            cert = "RSA-2048" if config.cert == "rsa" else "ECDSA P-256"
            row = [server, config.version, config.suite, cert]
            for case in args.cases:
                if not_applicable(server, config, case):
                    row += ["n/a", "n/a"]
                    continue
                stats = by_config[config.label][case]
                row += [cell(stats, "req_per_s", "{:,.0f}"), cell(stats, "cpu_us_per_request", "{:.1f}")]
            lines.append("| " + " | ".join(row) + " |")
    return lines


def detail_table(configs, summary, results, args):
    lines = [
        "| Server | Config | Case | runs | req/s min–max | µs/req min–max | busy: server / client |",
        "|---|---|---|---|---|---|---|",
    ]
    for server, by_config in summary.items():
        for config in configs:
            for case in args.cases:
                if not_applicable(server, config, case):
                    continue
                runs = results[server][config.label][case]
                stats = by_config[config.label][case]
                ok = runs_cell(runs)
                if not stats["req_per_s"]:
                    lines.append(f"| {server} | {config.label} | {case} | {ok} | | | |")
                    continue
                rate, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
                busy = f"{stats['server_busy']['median']:.0%} / {stats['client_busy']['median']:.0%}"
                lines.append(
                    f"| {server} | {config.label} | {case} | {ok} "
                    f"| {rate['min']:,.0f}–{rate['max']:,.0f} "
                    f"| {cpu['min']:.1f}–{cpu['max']:.1f} | {busy} |"
                )
    return lines


def not_measured(configs, servers, cases):
    """Why cells are n/a, once per reason."""
    return sorted(
        {
            f"- n/a: {server} {case}: {reason}"
            for server in servers
            for config in configs
            for case in cases
            if (reason := not_applicable(server, config, case))
        }
    )


def machine_description(args):
    versions = ", ".join(environment.first_line(argv) for argv in (["openssl", "version"], ["h2load", "--version"]))
    return (
        f"{environment.host_line(with_aes=True)}; "
        f"{versions}. Server: one worker on CPU {environment.cpu_list(args.server_cpus)}; "
        f"client on CPU {environment.cpu_list(args.client_cpus)}: "
        f"wrk -t1 -c{args.connections} (HTTPS/1.1), h2load -t1 -c{args.connections} -m{args.streams} "
        f"(HTTPS/2), wrk -t1 -c{args.handshake_connections} with Connection: close (a handshake per "
        f"request: full with xKit's resumption off, resumed with it on; X25519 key exchange). "
        f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} rounds, medians; "
        f"µs = server CPU (user+system) per request or handshake."
    )


def render(configs, results, by_key, skipped, args, machine):
    summary = summarize(results)
    lines = ["## TLS cipher suites", "", machine, ""]
    lines += main_table(configs, summary, args) + [""]
    lines += ["### Spread and load", ""] + detail_table(configs, summary, results, args) + [""]
    lines += failure_lines(
        by_key, skipped, "### Not measured, skipped and failed", not_measured(configs, list(results), args.cases)
    )
    return "\n".join(lines).rstrip() + "\n", summary


# --- run ------------------------------------------------------------------------


def run(args):
    configs = [config for config in all_configs(args.certs) if config.suite in args.suites]
    if not configs:
        args.parser.error("no suite in --suites goes with the certificates in --certs")

    def measure(bench):
        machine = machine_description(args)
        certs = {cert: make_certificate(bench.work_dir, cert) for cert in args.certs}
        peers, skipped = prepare_peers(args, bench.work_dir, certs)
        servers = [name for name in args.servers if name not in skipped]
        plan, cells = {}, {}
        for config in configs:
            for case in args.cases:
                key = f"{config.label} {case}"
                plan[key] = [name for name in servers if not not_applicable(name, config, case)]
                cells[key] = (config, case)

        def measure_one(key, name):
            config, case = cells[key]
            peer = configured(peers[name, config.cert], config, case)
            client_conf = client_openssl_conf(config, bench.work_dir)
            return bench.run_once(
                peer,
                f"{config.suite}-{config.cert}-{case}",
                lambda server: measure_case(server, case, config, args, client_conf),
            )

        by_key = bench.rounds(plan, measure_one)
        results = {
            name: {
                config.label: {case: by_key[f"{config.label} {case}"].get(name, []) for case in args.cases}
                for config in configs
            }
            for name in servers
        }
        markdown, summary = render(configs, results, by_key, skipped, args, machine)
        return markdown, {
            "machine": machine,
            "skipped": skipped,
            "configs": [asdict(config) for config in configs],
            "results": results,
            "summary": summary,
        }

    return run_comparison(args, "ciphers", ["taskset", "wrk", "h2load", "openssl"], measure)
