"""Reading Linux's ``/proc``: the one parser of ``/proc/PID/stat`` that the kill bench, the
load probe, the Spark hosts fixture and its bench share."""

from __future__ import annotations

import os


def pids() -> list[int]:
    """Every live process id (``/proc``'s numeric entries); empty where /proc is missing."""
    try:
        return [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name: index 0 is the state, 1 the parent
    pid, 3 the session id, 11–14 utime, stime, cutime, cstime (clock ticks). None when the
    process is gone. The command name (field 2) may hold spaces and parentheses, so the
    split starts after its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None  # exited while we looked
    return stat[stat.rfind(")") + 2:].split()


def cpu_ticks(fields: list[str]) -> int:
    """utime + stime + cutime + cstime of a :func:`stat_fields` result, in clock ticks."""
    return sum(int(x) for x in fields[11:15])


def children_map() -> dict[int, list[int]]:
    """Parent pid → its live children's pids, from one scan of ``/proc``."""
    children: dict[int, list[int]] = {}
    for pid in pids():
        fields = stat_fields(pid)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(pid)
    return children


def descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``root`` (children first found, depth first)."""
    children = children_map() if children is None else children
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out
