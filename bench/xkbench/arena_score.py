"""HttpArena's scoring of engines, applied to `xkbench arena`'s medians: where each server measured
here would stand if this machine's scale were the board's. A pure function of a report's summary.

What the board does (github.com/MDA2AV/HttpArena, read 2026-11-28):
- site/content/docs/scoring/composite-score.md (commit 21f8f2d): a throughput profile scores
  100 × the entry's req/s ÷ the best entry's (its req/s averaged over the profile's connection
  counts first); the composite is the sum over the scored profiles, a profile not entered scores 0.
- site/content/docs/test-profiles/h1/isolated/latency-1m/implementation.md (commit abd6fca) and
  latency-10k/implementation.md (commit 4ff5766), after scripts/latency_score.py: a paced profile
  scores 100 × rateFactor × (0.60 × cpuScore + 0.25 × p99Score + 0.15 × p999Score), with
  rateFactor = min(1, achieved req/s ÷ 95% of the offered rate), cpuScore = best CPU µs/req ÷ the
  entry's, p99Score = 1 − log10(p99 ÷ best p99) ÷ 3 and p999Score alike, each clamped to 0–1,
  and not rebased so that the leader scores 100.
The profiles scored for engines are those of ../shared/arena/CONTRACT.md (20, PROFILES below).
"""

import math

# How each profile the board scores for engines is scored: "rps" (req/s over the best) or
# "paced" (CPU and tail latency at a fixed rate). Reference-only profiles (pipelined) are not here.
PROFILES = {
    "baseline": "rps",
    "limited-conn": "rps",
    "async": "rps",
    "latency-1m": "paced",
    "latency-10k": "paced",
    "json-tls": "rps",
    "8gbit": "paced",
    "baseline-h2": "rps",
    "static-h2": "rps",
    "baseline-h2c": "rps",
    "unary-grpc": "rps",
    "unary-grpc-tls": "rps",
    "echo-ws": "rps",
    "echo-ws-pipeline": "rps",
    "echo-ws-limited": "rps",
    "baseline-h3": "rps",
    "static-h3": "rps",
    "gateway-64": "rps",
    "gateway-h3": "rps",
    "production-stack": "rps",
}
PACED_RATE_SHARE = 0.95  # full credit from 95% of the offered rate
LATENCY_DECADES = 3  # p99Score reaches 0 at 1000× the best
PACED_WEIGHTS = {"cpu": 0.60, "p99": 0.25, "p999": 0.15}


def median(summary, profile, server, key):
    found = summary.get(profile, {}).get(server, {}).get(key)
    return found.get("median") if isinstance(found, dict) else found


def clamp(value):
    return max(0.0, min(1.0, value))


def decade_score(value, best):
    """1 at the best, 0 at LATENCY_DECADES decades worse, on a log scale."""
    if not value or not best:
        return 0.0
    return clamp(1 - math.log10(value / best) / LATENCY_DECADES)


def rps_scores(summary, profile, servers):
    rates = {s: median(summary, profile, s, "req_per_s") for s in servers}
    rates = {s: r for s, r in rates.items() if r}
    best = max(rates.values(), default=0)
    return {s: 100 * rates[s] / best for s in rates} if best else {}


def paced_scores(summary, profile, servers):
    """{server: score} of a paced profile; a server's run counts if it has CPU and latencies."""
    figures = {}
    for s in servers:
        values = {k: median(summary, profile, s, k) for k in ("req_per_s", "target_rate", "cpu_us_per_request")}
        values.update(p99=median(summary, profile, s, "p99_us"), p999=median(summary, profile, s, "p999_us"))
        if all(values.values()):
            figures[s] = values
    if not figures:
        return {}
    best_cpu = min(f["cpu_us_per_request"] for f in figures.values())
    best_p99 = min(f["p99"] for f in figures.values())
    best_p999 = min(f["p999"] for f in figures.values())
    scores = {}
    for s, f in figures.items():
        rate_factor = min(1.0, f["req_per_s"] / (PACED_RATE_SHARE * f["target_rate"]))
        quality = (
            PACED_WEIGHTS["cpu"] * clamp(best_cpu / f["cpu_us_per_request"])
            + PACED_WEIGHTS["p99"] * decade_score(f["p99"], best_p99)
            + PACED_WEIGHTS["p999"] * decade_score(f["p999"], best_p999)
        )
        scores[s] = 100 * rate_factor * quality
    return scores


def score(summary, servers):
    """{"profiles": {profile: {server: score}}, "composite": {server: sum}} over PROFILES, the
    best of each profile taken among servers (the pool this report measured). A profile a server
    did not run (or that was not measured) scores 0 for it."""
    profiles = {}
    for profile, kind in PROFILES.items():
        scorer = paced_scores if kind == "paced" else rps_scores
        profiles[profile] = scorer(summary, profile, servers)
    composite = {s: sum(by_server.get(s, 0.0) for by_server in profiles.values()) for s in servers}
    return {"profiles": profiles, "composite": composite}


def score_lines(scored, servers, labels, not_measured, scale_note):
    """The markdown section: one row per scored profile, the composite, and the caveats."""
    heads = " | ".join(labels[s] for s in servers)
    lines = [
        "### Scored as the board scores engines (`--score`)",
        "",
        f"| Profile | scored on | {heads} |",
        "|---|---|" + "---:|" * len(servers),
    ]
    for profile, kind in PROFILES.items():
        by_server = scored["profiles"][profile]
        how = "CPU, p99, p99.9 at a fixed rate" if kind == "paced" else "req/s ÷ best"
        if profile in not_measured:
            how = "not measured"
        cells = " | ".join(f"{by_server[s]:.1f}" if s in by_server else "0" for s in servers)
        lines.append(f"| {profile} | {how} | {cells} |")
    ceiling = 100 * len(PROFILES)
    cells = " | ".join(f"**{scored['composite'][s]:,.1f}**" for s in servers)
    lines.append(f"| **composite** (of {ceiling:,}) | sum | {cells} |")
    alone = [profile for profile, by_server in scored["profiles"].items() if len(by_server) == 1]
    lines += [
        "",
        "Caveats: " + scale_note + " The best of each profile is the best server measured here, not the "
        "board's field (whose leaders run 64 logical CPUs), so 100 means best of this run only"
        + (
            f"; {', '.join(alone)} had one server alone, which scores 100 (or the paced profiles' "
            "rate factor) for running at all"
            if alone
            else ""
        )
        + ". The board "
        "averages req/s over several connection counts; here each profile runs one. The paced profiles "
        "are scored on the medians of the runs (the board keeps each entry's best of three). h2o and nginx "
        "are infrastructure entries on the board, scored there in their own pool; here they stand in the "
        "engine pool to show where xKit would stand against them, and score 0 on the profiles their "
        "entries are not entered in. 8gbit is scored with the latency profiles' formula (the contract "
        'scores it "as latency-*"); latency-10k counts as the contract says, though HttpArena\'s '
        "latency-10k page calls it reference-only for now: without it, the composites are "
        + ", ".join(
            f"{labels[s]} {scored['composite'][s] - scored['profiles']['latency-10k'].get(s, 0.0):,.1f}"
            for s in servers
        )
        + ".",
        "",
    ]
    return lines
