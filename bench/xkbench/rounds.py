"""Rounds: every server measured in turn, round after round, the order reversed every other
round, so drift and background load on a shared machine hit every server alike."""

import sys


def in_turn(names, round_index):
    """The order of the servers in a round (counted from 0): as given, then reversed."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def run_rounds(runs, plan, measure, out=sys.stderr):
    """plan: {case: [server, ...]}. Calls measure(case, server) -> a run's record with "ok"
    (and "error" when not) runs times per pair; returns {case: {server: [records]}}."""
    results = {case: {name: [] for name in names} for case, names in plan.items()}
    for index in range(runs):
        for case, by_server in results.items():
            for name in in_turn(by_server, index):
                print(f"round {index + 1}/{runs}: {case} on {name}", file=out, flush=True)
                record = measure(case, name)
                if not record["ok"]:
                    print(f"  failed: {record['error']}", file=out, flush=True)
                by_server[name].append(record)
    return results


def failure_lines(results, skipped, heading="### Skipped and failed", notes=()):
    """The report's list of notes, servers skipped (and why) and runs failed (and why)."""
    lines = list(notes) + [f"- {server}: skipped — {reason}" for server, reason in skipped.items()]
    for case, by_server in results.items():
        for server, runs in by_server.items():
            lines += [
                f"- {server} {case} run {index}: failed — {run['error']}"
                for index, run in enumerate(runs, 1)
                if not run["ok"] and "error" in run
            ]
    return [heading, ""] + lines if lines else []


def runs_cell(runs):
    return f"{sum(run['ok'] for run in runs)}/{len(runs)} ok"
