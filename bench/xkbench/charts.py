"""One SVG per section, written by hand: req/s and server CPU µs per request, side by side,
as grouped bars along the section's axis (connections or size), one bar per server."""

import math
from html import escape

from .stats import median_of

COLORS = {"xkit": "#d9480f", "go": "#0b7fa6", "nginx": "#2f9e44", "h2o": "#7048e8"}
PANEL_WIDTH, PANEL_HEIGHT = 420, 240
MARGIN_LEFT, MARGIN_TOP, MARGIN_BOTTOM = 56, 66, 44
PANELS = (("req_per_s", "Requests per second (median)"), ("cpu_us_per_request", "Server CPU µs per request (median)"))


def nice_step(top, ticks=4):
    """A round step (1, 2 or 5 times a power of ten) that covers top in about `ticks` steps."""
    if top <= 0:
        return 1
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def short_number(value):
    """Three significant digits at most: 127k, 1.2M, 3.24, 56."""
    for scale, suffix in ((1e6, "M"), (1e3, "k"), (1, "")):
        if value >= scale or scale == 1:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def text(x, y, content, size=11, anchor="middle", weight="normal", color="#222"):
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-weight="{weight}" fill="{color}">{escape(content)}</text>'
    )


def panel(rows, servers, metric, title, left):
    """One bar chart; servers with no median at a point (failed, n/a) leave a gap there."""
    plot_width = PANEL_WIDTH - MARGIN_LEFT - 16
    plot_height = PANEL_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    values = [[median_of(row["results"].get(server["name"]), metric) for server in servers] for row in rows]
    top = max([value for group in values for value in group if value is not None], default=0)
    step = nice_step(top)
    scale_top = step * max(1, math.ceil(top / step)) if top else step
    x0, y0 = left + MARGIN_LEFT, MARGIN_TOP + plot_height
    parts = [text(left + PANEL_WIDTH / 2, MARGIN_TOP - 22, title, 12, weight="bold")]
    tick = 0.0
    while tick <= scale_top * 1.0001:
        y = y0 - plot_height * tick / scale_top
        parts.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + plot_width}" y2="{y:.1f}" stroke="#ddd" stroke-width="1"/>'
        )
        parts.append(text(x0 - 6, y + 4, short_number(tick), 10, "end", color="#555"))
        tick += step
    group_width = plot_width / max(len(rows), 1)
    bar_width = min(28.0, group_width * 0.8 / max(len(servers), 1))
    for index, (row, group) in enumerate(zip(rows, values, strict=True)):
        center = x0 + group_width * (index + 0.5)
        first = center - bar_width * len(servers) / 2
        for slot, (server, value) in enumerate(zip(servers, group, strict=True)):
            if value is None:
                continue
            height = plot_height * value / scale_top
            x = first + slot * bar_width
            if bar_width >= 16:  # room for a value over the bar
                size = 9 if bar_width >= 24 else 7.5
                parts.append(text(x + bar_width / 2 - 1, y0 - height - 3, short_number(value), size, color="#333"))
            parts.append(
                f'<rect x="{x:.1f}" y="{y0 - height:.1f}" '
                f'width="{bar_width - 2:.1f}" height="{height:.1f}" '
                f'fill="{COLORS.get(server["name"], "#888")}">'
                f"<title>{escape(server['label'])}, {escape(row['label'])}: {value:,.2f}</title></rect>"
            )
        parts.append(text(center, y0 + 16, row["label"], 10, color="#333"))
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + plot_width}" y2="{y0}" stroke="#888"/>')
    return parts


def section_svg(section, servers):
    """The chart of one report section (a dict as in the JSON report); servers is the list of
    {"name", "label"} in column order."""
    width, height = 2 * PANEL_WIDTH, PANEL_HEIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        text(12, 18, f"{section['protocol_title']}: {section['title']}", 13, "start", "bold"),
    ]
    legend_x = 12
    for server in servers:
        parts.append(
            f'<rect x="{legend_x}" y="{height - 14}" width="10" height="10" '
            f'fill="{COLORS.get(server["name"], "#888")}"/>'
        )
        parts.append(text(legend_x + 14, height - 5, server["label"], 11, "start"))
        legend_x += 24 + 7 * len(server["label"])
    parts.append(text(width - 12, height - 5, section["axis"], 11, "end", color="#555"))
    for index, (metric, title) in enumerate(PANELS):
        parts += panel(section["rows"], servers, metric, title, index * PANEL_WIDTH)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
