"""The SVG charts: well-formed, two panels (req/s and CPU µs/req), one bar per server that has a
median at a point, a gap where a case failed or was not run, the axis labelled by the section."""

import unittest
import xml.etree.ElementTree as ET

import support
from xkbench import charts

SVG = "{http://www.w3.org/2000/svg}"


def parse(section, servers):
    return ET.fromstring(charts.section_svg(section, servers))


def bar_titles(root):
    return [rect.find(f"{SVG}title").text for rect in root.iter(f"{SVG}rect") if rect.find(f"{SVG}title") is not None]


class SectionChartTest(unittest.TestCase):
    def setUp(self):
        self.report = support.sample_report()
        self.servers = self.report["servers"]

    def test_is_well_formed_svg_with_both_panels_and_the_axis_name(self):
        root = parse(self.report["sections"][0], self.servers)
        self.assertEqual(root.tag, f"{SVG}svg")
        texts = [element.text for element in root.iter(f"{SVG}text")]
        self.assertIn("Requests per second (median)", texts)
        self.assertIn("Server CPU µs per request (median)", texts)
        self.assertIn("Connections", texts)
        self.assertIn("HTTP/1.1: GET /ping by connections", texts)
        for label in ("xKit", "Go", "nginx", "50", "500"):
            self.assertIn(label, texts)

    def test_one_bar_per_server_with_a_median_and_gaps_for_failed_cases(self):
        titles = bar_titles(parse(self.report["sections"][0], self.servers))
        # 2 points × 3 servers, minus Go failed at 500, in both panels
        self.assertEqual(len(titles), 10)
        self.assertIn("xKit, 50: 100,000.00", titles)
        self.assertIn("Go, 50: 20.00", titles)
        self.assertNotIn("Go, 500", " ".join(titles))

    def test_servers_not_built_or_n_a_draw_nothing(self):
        titles = bar_titles(parse(self.report["sections"][3], self.servers))  # HTTPS/2 POST
        self.assertEqual(sorted({title.split(",")[0] for title in titles}), ["Go"])

    def test_bars_stay_inside_the_plot(self):
        root = parse(self.report["sections"][1], self.servers)
        bars = [rect for rect in root.iter(f"{SVG}rect") if rect.find(f"{SVG}title") is not None]
        for bar in bars:
            top, height = float(bar.get("y")), float(bar.get("height"))
            self.assertGreaterEqual(top, charts.MARGIN_TOP - 0.1)
            self.assertLessEqual(top + height, charts.PANEL_HEIGHT - charts.MARGIN_BOTTOM + 0.1)

    def test_a_section_with_no_numbers_still_draws(self):
        section = dict(self.report["sections"][0])
        section["rows"] = [
            dict(row, results={name: {"status": "failed"} for name in row["results"]}) for row in section["rows"]
        ]
        self.assertEqual(bar_titles(parse(section, self.servers)), [])


class ScaleTest(unittest.TestCase):
    def test_steps_are_one_two_or_five_times_a_power_of_ten(self):
        self.assertEqual(charts.nice_step(120000), 50000)
        self.assertEqual(charts.nice_step(47.3), 20)
        self.assertEqual(charts.nice_step(0.9), 0.5)
        self.assertEqual(charts.nice_step(0), 1)

    def test_short_numbers(self):
        self.assertEqual(charts.short_number(127416), "127k")
        self.assertEqual(charts.short_number(1188882), "1.19M")
        self.assertEqual(charts.short_number(3.244), "3.24")
        self.assertEqual(charts.short_number(0), "0")


if __name__ == "__main__":
    unittest.main()
