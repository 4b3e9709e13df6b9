"""``python -m stretchflow_bench.nexmark_rows EXPECTED GOT``: two outputs of a NEXMark query
compared as ``bench nexmark`` compares them (:func:`.userflows.compare`: the multiset of rows,
``ts`` included, float fields within a relative 1e-9, every other field exact); prints the
result as JSON and exits 1 when they differ."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .userflows import compare


def main(argv: list[str]) -> int:
    result = compare(Path(argv[0]), Path(argv[1]))
    result["correct"] = result["equal"]
    print(json.dumps(result))
    return 0 if result["correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
