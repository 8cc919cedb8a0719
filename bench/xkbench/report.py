"""The suite's report: one JSON-ready dict, rendered as markdown, written with its charts as
OUT/suite/STAMP.{md,json} beside OUT/suite/STAMP/*.svg, and as OUT/latest.md and latest.json."""

from pathlib import Path

from . import results, stats
from .charts import section_svg
from .loadgen import LATENCY_RUN_SECONDS

SUBCOMMAND = "suite"

SCHEMA = "xkit-bench/1"
PRIMARY, REFERENCE = "xkit", "go"  # Δ is the first's req/s against the second's


def section_entry(section, rows, command):
    """A section of the JSON report, with Δ (xKit's req/s over Go's) on every row."""
    for row in rows:
        row["delta_req_per_s"] = stats.delta(
            stats.median_of(row["results"].get(PRIMARY), "req_per_s"),
            stats.median_of(row["results"].get(REFERENCE), "req_per_s"),
        )
    return {
        "id": section.id,
        "protocol": section.protocol.key,
        "protocol_title": section.protocol.title,
        "protocol_short": section.protocol.short,
        "tool": section.protocol.tool,
        "kind": section.kind,
        "title": section.title,
        "axis": section.axis,
        "command": command,
        "chart": f"{section.id}.svg",
        "rows": rows,
    }


def summary_entries(sections, peer_names):
    """Per section, the median over its rows of xKit ÷ Go for req/s and CPU µs/req, and
    how many of its measured cells failed."""
    entries = []
    for section in sections:
        cells = [row["results"][name] for row in section["rows"] for name in peer_names]
        entry = {
            "section": section["id"],
            "failed": sum(cell["status"] == "failed" for cell in cells),
            "ok": sum(cell["status"] == "ok" for cell in cells),
        }
        if REFERENCE in peer_names:
            for metric in ("req_per_s", "cpu_us_per_request"):
                entry[f"{metric}_ratio"] = stats.median_ratio(section["rows"], PRIMARY, REFERENCE, metric)
        entries.append(entry)
    return entries


# --- markdown ------------------------------------------------------------------


def number(value):
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


LATENCY_METRICS = ("latency_ms", "latency_p50_ms", "latency_p99_ms")


def milliseconds(value):
    if value is None:
        return "–"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def latency_cell(result):
    """Mean / p50 / p99 in ms, the medians over the runs; "–" for a figure the runs lack."""
    if result["status"] != "ok":
        return "–"
    return " / ".join(milliseconds(stats.median_of(result, metric)) for metric in LATENCY_METRICS) + " ms"


def plural(count, noun):
    return f"{count} {noun}" + ("" if count == 1 else "s")


def signed_percent(fraction):
    return "n/a" if fraction is None else f"{fraction:+.0%}".replace("-", "−")


def times(value):
    return "n/a" if value is None else f"{value:.2f}×"


def ratio_cell(spread):
    if spread is None:
        return "n/a"
    if len({round(spread["min"], 2), round(spread["max"], 2)}) == 1:
        return times(spread["median"])
    return f"{times(spread['median'])} ({spread['min']:.2f}–{spread['max']:.2f}×)"


def metric_cell(result, metric, render):
    if result["status"] != "ok":
        return result["status"] if metric == "req_per_s" else "–"
    return render(stats.median_of(result, metric))


def section_table(section, servers):
    """| axis | Req/s per server | Latency (mean / p50 / p99) per server | Δ | CPU µs/req per server | spread |"""
    names = [server["name"] for server in servers]
    labels = {server["name"]: server["label"] for server in servers}
    with_delta = PRIMARY in names and REFERENCE in names
    header = (
        [section["axis"]]
        + [f"{labels[n]} Req/s" for n in names]
        + [f"{labels[n]} Latency mean / p50 / p99" for n in names]
        + (["Δ"] if with_delta else [])
        + [f"{labels[n]} CPU µs/req" for n in names]
        + ["Req/s spread"]
    )
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 2) + "---|"]
    for row in section["rows"]:
        results = row["results"]
        cells = [row["label"]]
        cells += [metric_cell(results[n], "req_per_s", number) for n in names]
        cells += [latency_cell(results[n]) for n in names]
        if with_delta:
            cells.append(signed_percent(row["delta_req_per_s"]))
        cells += [metric_cell(results[n], "cpu_us_per_request", number) for n in names]
        spreads = [
            f"{labels[n]} {stats.relative_spread(results[n]['req_per_s']):.0%}"
            for n in names
            if results[n]["status"] == "ok"
        ]
        cells.append(" · ".join(spreads) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def section_notes(section, servers):
    """Why cells are empty (once per reason), every failure, and how busy the cores were
    with anything but the server and the load generator."""
    notes, others = [], []
    for server in servers:
        for row in section["rows"]:
            result = row["results"][server["name"]]
            others += [run.get("others_busy") or 0 for run in result.get("runs", [])]
            if result["status"] == "failed":
                notes.append(
                    f"- {server['label']}, {section['axis'].lower()} {row['label']}: **failed**: {result['error']}"
                )
            elif result["status"] != "ok":
                note = f"- {server['label']}: {result['status']}: {result['error']}"
                if note not in notes:
                    notes.append(note)
    if others:
        notes.append(
            f"- Other load on the measured cores during the runs: up to "
            f"{max(others):.0%} of a core (median {stats.spread(others)['median']:.0%})."
        )
    return notes


def summary_table(report):
    labels = {server["name"]: server["label"] for server in report["servers"]}
    titles = {section["id"]: f"{section['protocol_short']}: {section['title']}" for section in report["sections"]}
    with_ratio = REFERENCE in labels
    lines = [
        "| Section | " + ("xKit Req/s ÷ Go | xKit CPU µs/req ÷ Go | " if with_ratio else "") + "Cells ok | Failed |",
        "|---|" + ("---:|---:|" if with_ratio else "") + "---:|---:|",
    ]
    for entry in report["summary"]:
        ratios = (
            [ratio_cell(entry["req_per_s_ratio"]), ratio_cell(entry["cpu_us_per_request_ratio"])] if with_ratio else []
        )
        lines.append(
            "| " + " | ".join([titles[entry["section"]]] + ratios + [str(entry["ok"]), str(entry["failed"])]) + " |"
        )
    return lines


def render_markdown(report, chart_prefix=""):
    """The report as markdown; charts are linked as chart_prefix + the section's chart file."""
    settings = report["settings"]
    servers = report["servers"]
    labels = [server["label"] for server in servers]
    names = " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 1 else labels)
    lines = [
        f"# xKit benchmark report, {report['date']} ({report['mode']} suite)",
        "",
        f"{names} on the same cores, measured by `{report['command']}` in "
        f"{report['elapsed_s'] / 60:.1f} min. Each server had "
        f"{plural(settings['workers'], 'core')} (CPU {settings['server_cpus']}), the load "
        f"generator CPU {settings['client_cpus']}. "
        f"{plural(settings['runs'], 'run')} of {settings['duration_s']} s per case and server, the order "
        f"of servers alternating between runs; wrk warms each server up for "
        f"{settings['warmup_s']} s before a case, h2load opens its connections in a "
        f"{settings['warmup_s']}-s warm-up inside every run. Tables show medians; every run is in "
        f"the JSON. A case whose load generator saw any socket error, timeout or non-2xx "
        f"response is marked failed, not averaged.",
        "",
        "**Req/s** and **Latency** (mean / p50 / p99 of a request's time) are the load generator's: "
        "wrk's percentiles are its `--latency` distribution; h2load prints none, so its p50 and p99 "
        f"come from its `--log-file` in a {LATENCY_RUN_SECONDS}-s run of the same command right after "
        "each measured one: the log costs h2load about 1 µs per request, which would slow the "
        "measured run where h2load is the bottleneck (and does slow the logged one, so there an "
        "h2load p50 can exceed the mean). **Δ** is xKit's req/s over "
        "Go's. **CPU µs/req** is the server's user + system time (`/proc/PID/stat`, all threads; "
        "nginx: its workers) over the measured time, divided by the requests completed: it does "
        "not depend on the load generator keeping up, and is the figure to trust on a small or "
        "shared machine. wrk opens its connections inside the measured time, so HTTPS/1.1 rows "
        "include a TLS handshake per connection; h2load's rows do not.",
        "",
        "## Test Environment",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value} |" for key, value in report["environment"].items()]
    lines += ["", "## Summary", "", "Medians over each section's rows of the ratio of medians.", ""]
    lines += summary_table(report)
    if report["notes"]:
        lines += [""] + [f"- {note}" for note in report["notes"]]
    protocol = None
    for section in report["sections"]:
        if section["protocol_title"] != protocol:
            protocol = section["protocol_title"]
            lines += ["", f"## {protocol}, with {section['tool']}"]
        lines += [
            "",
            f"### {section['title']}",
            "",
            f"`{section['command']}`",
            "",
            f"![{protocol}: {section['title']}]({chart_prefix}{section['chart']})",
            "",
        ]
        lines += section_table(section, servers)
        notes = section_notes(section, servers)
        if notes:
            lines += [""] + notes
    return "\n".join(lines) + "\n"


def write_report(report, out_dir):
    """Writes OUT/suite/STAMP.md and .json with the section charts in OUT/suite/STAMP/ (STAMP
    is the date, numbered from the second run of a day on: results.next_stamp), then
    OUT/latest.md and latest.json, which link the same charts. Returns the paths written."""
    folder = Path(out_dir) / SUBCOMMAND
    folder.mkdir(parents=True, exist_ok=True)
    stamp = results.next_stamp(folder, report["date"])
    charts = folder / stamp
    charts.mkdir()
    written = []
    for section in report["sections"]:
        path = charts / section["chart"]
        path.write_text(section_svg(section, report["servers"]))
        written.append(path)
    data = results.json_text(report)
    for path, content in (
        (folder / f"{stamp}.md", render_markdown(report, f"{stamp}/")),
        (folder / f"{stamp}.json", data),
        (Path(out_dir) / "latest.md", render_markdown(report, f"{SUBCOMMAND}/{stamp}/")),
        (Path(out_dir) / "latest.json", data),
    ):
        path.write_text(content)
        written.append(path)
    return written
