"""Standalone programs that run the sliding wordcount and paircount on peer systems
(``stretchflow bench peers``, docs/peers.md). Each runs inside the peer's own virtualenv, so
none imports stretchflow: ``python PROGRAM QUERY INPUT OUTPUT [NAME=VALUE ...]`` reads the
generated tweets (JSON Lines ``{"ts", "text", ...}``), writes JSON Lines rows
``{"ts", "word", "count"}`` or ``{"ts", "first", "second", "count"}`` (``ts`` is the window's
right boundary) and prints one JSON line: ``{"elapsed_s", "rows_out", ...}``."""
