"""xKit's benchmarks as one tool, `python3 bench/xkbench SUBCOMMAND` (cli.py has the table):
servers and peers started pinned to their cores (servers.py, peers.py), wrk and h2load runs
with the server's CPU from /proc (loadgen.py, parsing.py), rounds with the order alternating
(rounds.py), medians (stats.py), and reports under bench/results/ (results.py). commands/
holds the subcommands: suite, compare http1|h2c|https, ciphers."""
