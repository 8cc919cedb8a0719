"""Medians, spreads and the comparisons the report makes between servers."""

import statistics

METRICS = ("req_per_s", "latency_ms", "latency_p50_ms", "latency_p99_ms", "cpu_us_per_request")


def spread(values):
    """{"median", "min", "max"} of the values that are there, or None when none is."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def summarize(runs):
    """A case's result for one server from its runs. A case with any failed run is failed:
    its numbers are kept in the runs, never folded into a median."""
    failures = [run for run in runs if not run["ok"]]
    summary = {
        "status": "failed" if failures or not runs else "ok",
        "runs": runs,
        "error": (failures[0]["problems"] or ["failed"])[0] if failures else None,
    }
    if not runs:
        summary["error"] = "no run"
    for metric in METRICS:
        summary[metric] = None if failures else spread([run[metric] for run in runs])
    return summary


def median_of(result, metric):
    """The median of metric in one server's result for a case, or None if it has none."""
    if not result or result.get("status") != "ok" or not result.get(metric):
        return None
    return result[metric]["median"]


def ratio(ours, theirs):
    """ours ÷ theirs, or None when either is missing or theirs is zero."""
    if ours is None or not theirs:
        return None
    return ours / theirs


def delta(ours, theirs):
    """How much more ours is than theirs, as a fraction (+0.25 is 25% more), or None."""
    quotient = ratio(ours, theirs)
    return None if quotient is None else quotient - 1


def relative_spread(stats):
    """(max − min) ÷ median, or None."""
    if not stats or not stats["median"]:
        return None
    return (stats["max"] - stats["min"]) / stats["median"]


def median_ratio(rows, ours, theirs, metric):
    """The median over a section's rows of ours ÷ theirs for metric, where both have one."""
    return spread(
        [
            ratio(median_of(row["results"].get(ours), metric), median_of(row["results"].get(theirs), metric))
            for row in rows
        ]
    )


def spread_of(runs, key):
    """The spread of key over the runs that succeeded, or None when none did."""
    return spread([run[key] for run in runs if run.get("ok") and run.get(key) is not None])


def summarize_rounds(results, keys):
    """{case: {server: {key: spread}}} of what rounds.run_rounds returned; keys(case) names
    the figures a case has."""
    return {
        case: {server: {key: spread_of(runs, key) for key in keys(case)} for server, runs in by_server.items()}
        for case, by_server in results.items()
    }


def summary_median(summary, case, server, key):
    """The median of key for server in a summarize_rounds summary, or None."""
    found = summary.get(case, {}).get(server, {}).get(key)
    return found["median"] if found else None
