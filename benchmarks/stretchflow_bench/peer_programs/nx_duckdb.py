"""NEXMark Q0–Q8 in DuckDB SQL, bounded: the whole file at once, what a Python user who has
the NEXMark files and SQL writes instead of a stream engine (``bench nexmark``'s "duckdb"
baseline).

``python nx_duckdb.py QUERY DATA_DIR OUTPUT [format=parquet|jsonl] [window=MS] [slide=MS]``
in the DuckDB venv (``peers.py``); reads ``DATA_DIR/nx-{persons,auctions,bids}.FORMAT``,
writes OUTPUT as JSON Lines (the query's fields and ``ts``) with one ``COPY (query) TO ...
(FORMAT json)`` and prints ``{"elapsed_s", "rows_out", "settings"}`` as JSON, the time from
just before the input is read (the views over the files are made inside it) to OUTPUT closed;
importing duckdb and opening an in-memory database are start-up, before it. DuckDB runs on
its own threads (one per core by default; ``settings`` says how many) with
``preserve_insertion_order = false``: the output is compared as a multiset per ``ts``, so the
engine is free not to keep the input's order (which also lets it write in parallel).

Each query is one SQL statement over views of the files (``read_parquet``, or
``read_ndjson`` with the columns' types given so nothing is sampled), so DuckDB reads only the
columns it uses and pushes filters into the scan. Semantics are stretchflow's
(docs/nexmark.md): tumbling windows ``[l, l + W)``, ``l = ts // W * W``, each output at
stretchflow's ``ts``.

- Q0, Q1, Q2: a projection, Q1 ``price * 0.908`` as a DOUBLE (a bare ``0.908`` would make it
  a DECIMAL), Q2 a ``WHERE``.
- Q3: an inner join of persons and auctions on (window, id = seller); Q8 a ``SEMI JOIN``.
- Q4, Q6: the auctions that close in their window joined with their bids on auction id and
  ``bid date_time BETWEEN date_time AND expires``, the ``max(price)`` per auction (the winning
  bid); Q4 ``avg`` per (window, category), Q6 ``avg(final) OVER (PARTITION BY seller ORDER BY
  window, expires, id ROWS 9 PRECEDING)``.
- Q5: counts per pane (``gcd(window, slide)`` wide) and auction, each pane joined with the
  offsets of the sliding windows that hold it (``range``), summed per window, then
  ``QUALIFY num = max(num) OVER (PARTITION BY window)``. DuckDB has no hopping-window table
  function; this is the slicing written in SQL.
- Q7: the max price per window joined back with the bids on (window, price). From Parquet
  the bids are scanned twice, the second time with ``price >= (SELECT min(price) FROM
  best)``, redundant with the join but pushed into the scan so the wide ``extra`` is decoded
  only for the few bids that pass (a third faster at 10 M bids than the join alone, which
  beats ``QUALIFY price = max(price) OVER (...)``); from JSON Lines, where every byte is
  parsed anyway, once, into a ``MATERIALIZED`` CTE that both sides read.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import duckdb

SCHEMAS = {
    "persons": {"ts": "BIGINT", "id": "BIGINT", "name": "VARCHAR", "email_address": "VARCHAR",
                "credit_card": "VARCHAR", "city": "VARCHAR", "state": "VARCHAR",
                "date_time": "BIGINT", "extra": "VARCHAR"},
    "auctions": {"ts": "BIGINT", "id": "BIGINT", "item_name": "VARCHAR",
                 "description": "VARCHAR", "initial_bid": "BIGINT", "reserve": "BIGINT",
                 "date_time": "BIGINT", "expires": "BIGINT", "seller": "BIGINT",
                 "category": "BIGINT", "extra": "VARCHAR"},
    "bids": {"ts": "BIGINT", "auction": "BIGINT", "bidder": "BIGINT", "price": "BIGINT",
             "channel": "VARCHAR", "url": "VARCHAR", "date_time": "BIGINT", "extra": "VARCHAR"},
}
BID_OUT = "auction, bidder, price, date_time, extra"

# Q4's and Q6's closed auctions (expiring before their window's end) with their winning bid;
# an auction without a bid in time drops out of the inner join
CLOSED = """
closed AS (
    SELECT a.l, a.id, a.category, a.seller, a.expires, max(b.price) AS final
    FROM (SELECT date_time // {w} * {w} AS l, id, category, seller, date_time, expires
          FROM auctions WHERE expires < date_time // {w} * {w} + {w}) a
    JOIN bids b ON b.auction = a.id AND b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.l, a.id, a.category, a.seller, a.expires
)"""

QUERIES = {
    "q0": f"SELECT ts, {BID_OUT} FROM bids",
    "q1": "SELECT ts, auction, bidder, price * 0.908::DOUBLE AS price, date_time, extra "
          "FROM bids",
    "q2": "SELECT ts, auction, price FROM bids WHERE auction % 123 = 0",
    "q3": """
        SELECT p.l + {w} AS ts, p.name, p.city, p.state, a.id
        FROM (SELECT ts // {w} * {w} AS l, id, name, city, state FROM persons
              WHERE state IN ('OR', 'ID', 'CA')) p
        JOIN (SELECT ts // {w} * {w} AS l, id, seller FROM auctions WHERE category = 10) a
          ON a.l = p.l AND a.seller = p.id""",
    "q4": "WITH" + CLOSED + """
        SELECT l + 3 * {w} AS ts, category, avg(final) AS avg FROM closed
        GROUP BY l, category""",
    "q5": """
        WITH panes AS (
            SELECT ts // {g} * {g} AS p, auction, count(*) AS n FROM bids
            GROUP BY p, auction),
        counts AS (
            -- the pane at p is in the windows l = p // s * s - k * s (k >= 0) with l + w > p
            SELECT p // {s} * {s} - k.range * {s} AS l, auction, sum(n) AS num
            FROM panes CROSS JOIN range({nk}) k
            WHERE p // {s} * {s} - k.range * {s} + {w} > p
            GROUP BY l, auction)
        SELECT l + {w} + {s} AS ts, auction, num FROM counts
        QUALIFY num = max(num) OVER (PARTITION BY l)""",
    "q6": "WITH" + CLOSED + """
        SELECT l + 2 * {w} + 1 AS ts, seller,
               avg(final) OVER (PARTITION BY seller ORDER BY l, expires, id
                                ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg
        FROM closed""",
    "q7": """
        WITH best AS (SELECT ts // {w} * {w} AS l, max(price) AS price FROM bids GROUP BY l)
        SELECT best.l + {w} AS ts, b.auction, b.bidder, b.price, b.date_time, b.extra
        FROM bids b JOIN best ON b.price = best.price AND b.ts // {w} * {w} = best.l
        -- implied by the join, but a filter DuckDB pushes into the scan (below)
        WHERE b.price >= (SELECT min(price) FROM best)""",
    # from JSON Lines every byte is parsed anyway: parse the bids once (a MATERIALIZED CTE)
    # instead of scanning the file twice for the maxima and the join
    "q7-jsonl": """
        WITH b AS MATERIALIZED (
            SELECT ts // {w} * {w} AS l, auction, bidder, price, date_time, extra FROM bids),
        best AS (SELECT l, max(price) AS price FROM b GROUP BY l)
        SELECT l + {w} AS ts, auction, bidder, price, date_time, extra
        FROM b JOIN best USING (l, price)""",
    "q8": """
        SELECT p.l + 2 * {w} AS ts, p.id, p.name, p.l AS starttime
        FROM (SELECT ts // {w} * {w} AS l, id, name FROM persons) p
        SEMI JOIN (SELECT ts // {w} * {w} AS l, seller FROM auctions) a
          ON a.l = p.l AND a.seller = p.id""",
}


def _views(con: duckdb.DuckDBPyConnection, data_dir: str, fmt: str) -> None:
    for name, schema in SCHEMAS.items():
        path = os.path.join(data_dir, f"nx-{name}.{fmt}").replace("'", "''")
        if fmt == "parquet":
            scan = f"read_parquet('{path}')"
        else:
            cols = ", ".join(f"'{c}': '{t}'" for c, t in schema.items())
            scan = f"read_ndjson('{path}', columns = {{{cols}}})"
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM {scan}")


def main(argv: list[str]) -> int:
    query, data_dir, outp, *rest = argv
    opts = dict(a.split("=", 1) for a in rest)
    fmt = opts.pop("format", "parquet")
    w, s = int(opts.pop("window", "10000")), int(opts.pop("slide", "2000"))
    if opts or fmt not in ("parquet", "jsonl") or query not in QUERIES or "-" in query:
        raise SystemExit(f"nx_duckdb: QUERY q0 .. q8, format=parquet|jsonl,"
                         f" window=MS, slide=MS; got {argv}")
    sql = QUERIES.get(f"{query}-{fmt}", QUERIES[query])
    sql = sql.format(w=w, s=s, g=math.gcd(w, s), nk=-(-w // s))
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    t0 = time.perf_counter()
    _views(con, data_dir, fmt)
    target = outp.replace("'", "''")
    rows = con.execute(f"COPY ({sql}) TO '{target}' (FORMAT json)").fetchone()[0]
    elapsed = time.perf_counter() - t0
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.close()
    print(json.dumps({"elapsed_s": elapsed, "rows_out": rows,
                      "settings": {"duckdb": duckdb.__version__, "format": fmt, "window": w,
                                   "slide": s, "threads": threads,
                                   "preserve_insertion_order": False}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
