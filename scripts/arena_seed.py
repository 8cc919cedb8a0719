#!/usr/bin/env python3
"""The arena's database, as SQL: the schema HttpArena's async-db, fortunes and
production-stack profiles read (shared/arena/CONTRACT.md, "The database") and
deterministic rows for it, the same bytes on every run and every machine (a
generator of its own, not Python's random, whose algorithms may change).

    python3 scripts/arena_seed.py > seed.sql && psql -v ON_ERROR_STOP=1 -f seed.sql DB

Tables: items (100,000 rows: id, name, category, price 1-500, quantity,
active, tags jsonb, rating_score, rating_count; no index on price, as the
arena has none), fortune (200 rows: TechEmpower's twelve, id 11 the <script>
one, then generated ones; the page they make is 18-64 KiB), users (1,000
rows, id 42 among them). Used by the tests (tests/integration/support/
postgres.py), the benchmarks and `make arena`."""

import argparse
import datetime
import json
import sys

ADJECTIVES = "Alpha Pro Core Ultra Smart Mega Nano Prime Swift Bold Quiet Bright Solid Rapid Grand".split()
NOUNS = "Widget Valve Relay Gadget Sensor Module Bracket Gear Switch Panel Filter Lamp Cable Pump Drive".split()
CATEGORIES = "electronics tools home garden sports toys books clothing automotive health".split()
TAGS = "sale new popular heavy-duty wireless fast eco compact premium limited".split()
PLANS = "free pro team enterprise".split()

# TechEmpower's fortunes (ids 1-12), the table the fortunes test renders.
CLASSIC_FORTUNES = [
    "fortune: No such file or directory",
    "A computer scientist is someone who fixes things that aren't broken.",
    "After enough decimal places, nobody gives a damn.",
    "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
    "A computer program does what you tell it to do, not what you want it to do.",
    "Emacs is a nice operating system, but I prefer UNIX. \u2014 Tom Christaensen",
    "Any program that runs right is obsolete.",
    "A list is only as strong as its weakest link. \u2014 Donald Knuth",
    "Feature: A bug with seniority.",
    "Computers make very fast, very accurate mistakes.",
    '<script>alert("This should not be displayed in a browser alert box.");</script>',
    "\u30d5\u30ec\u30fc\u30e0\u30ef\u30fc\u30af\u306e\u30d9\u30f3\u30c1\u30de\u30fc\u30af",
]
FORTUNE_SUBJECTS = "A test,Every cache,The database,A pointer,Each request,The scheduler,A good log,Latency".split(",")
FORTUNE_VERBS = "hides,reveals,outlives,forgets,doubles,remembers,breaks,explains".split(",")
FORTUNE_OBJECTS = [
    "the bug you fixed yesterday",
    "what the profiler already knew",
    "every assumption about <b>time</b>",
    "the cost of a 'quick' change",
    'a promise made in a "temporary" hack',
    "the difference between fast & correct",
    "whatever the benchmark measured",
    "one more byte than you allocated",
]


class Numbers:
    """splitmix64: a fixed, portable sequence from a seed."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def pick(self, seq):
        return seq[self.below(len(seq))]


def copy_text(value):
    """A value in COPY's text format."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def item_rows(count):
    numbers = Numbers(1)
    for id_ in range(1, count + 1):
        tags = []
        for _ in range(1 + numbers.below(4)):
            tag = numbers.pick(TAGS)
            if tag not in tags:
                tags.append(tag)
        yield (
            id_,
            f"{numbers.pick(ADJECTIVES)} {numbers.pick(NOUNS)}",
            numbers.pick(CATEGORIES),
            1 + numbers.below(500),
            numbers.below(101),
            numbers.below(10) != 0,
            json.dumps(tags, separators=(",", ":")),
            numbers.below(51),
            numbers.below(1000),
        )


def fortune_rows(count):
    numbers = Numbers(2)
    for id_, message in enumerate(CLASSIC_FORTUNES, 1):
        yield id_, message
    for id_ in range(len(CLASSIC_FORTUNES) + 1, count + 1):
        subject, verb, obj = numbers.pick(FORTUNE_SUBJECTS), numbers.pick(FORTUNE_VERBS), numbers.pick(FORTUNE_OBJECTS)
        yield id_, f"{subject} {verb} {obj} (#{id_})."


def user_rows(count):
    numbers = Numbers(3)
    for id_ in range(1, count + 1):
        name = f"{numbers.pick(ADJECTIVES)} {numbers.pick(NOUNS)} {id_}"
        yield id_, name, f"user{id_}@example.com", numbers.pick(PLANS), 1_700_000_000 + id_ * 3600


def write(out, items, fortunes, users):
    out.write("-- The arena's seed, written by scripts/arena_seed.py: do not edit.\n")
    out.write("SET client_encoding = 'UTF8';\nSET client_min_messages = warning;\n")
    out.write("DROP TABLE IF EXISTS items, fortune, users;\n")
    out.write(
        "CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, category text NOT NULL,"
        " price integer NOT NULL, quantity integer NOT NULL, active boolean NOT NULL, tags jsonb NOT NULL,"
        " rating_score integer NOT NULL, rating_count integer NOT NULL);\n"
    )
    out.write("CREATE TABLE fortune (id integer PRIMARY KEY, message text NOT NULL);\n")
    out.write(
        "CREATE TABLE users (id integer PRIMARY KEY, name text NOT NULL, email text NOT NULL,"
        " plan text NOT NULL, created_at timestamptz NOT NULL);\n"
    )
    tables = [
        ("items (id, name, category, price, quantity, active, tags, rating_score, rating_count)", item_rows(items)),
        ("fortune (id, message)", fortune_rows(fortunes)),
    ]
    for header, rows in tables:
        out.write(f"COPY {header} FROM stdin;\n")
        for row in rows:
            out.write("\t".join(copy_text(v) for v in row) + "\n")
        out.write("\\.\n")
    out.write("COPY users (id, name, email, plan, created_at) FROM stdin;\n")
    for id_, name, email, plan, seconds in user_rows(users):
        out.write(f"{id_}\t{copy_text(name)}\t{email}\t{plan}\t{timestamp(seconds)}\n")
    out.write("\\.\n")
    out.write("ANALYZE items;\nANALYZE fortune;\nANALYZE users;\n")


def timestamp(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S+00")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--fortunes", type=int, default=200)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("-o", "--output", help="file to write (default: standard output)")
    args = parser.parse_args()
    out = open(args.output, "w", encoding="utf-8", newline="\n") if args.output else sys.stdout
    write(out, args.items, args.fortunes, args.users)
    if args.output:
        out.close()


if __name__ == "__main__":
    main()
