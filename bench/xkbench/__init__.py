"""xKit's benchmark runner: servers pinned to their cores, wrk and h2load, /proc accounting,
and the report (markdown, JSON, SVG charts). bench/run_bench.py is the entry point;
bench/compare_http1.py and bench/compare_http2.py use the same pieces."""
