"""The congestion join of determinism-latency §6: per area, a 5 s sliding-window join of bus
reports and SCATS junction sensors; an event is raised when a bus reports congestion and a
sensor in the same area reports a flow above a threshold within the window.

The join is a J+ (:class:`~stretchflow.operators.join.Join`) keyed by area, with a ``single``
window set of ``window`` ms sliding by ``slide`` ms: a new tuple is compared with the other
input's tuples of the same area still in the window (the sliding window the paper's operator
shifts, §3 Fig. 6), so each pair is matched once, by whichever of the two arrives second.
Input 0 is the bus stream (``bus_reports``), input 1 the sensor stream (``scats_reports``).
"""

from __future__ import annotations

from typing import Any

from ..flow import Stream
from ..operators.join import Join


def congestion_join(window: int = 5000, slide: int = 100, flow_threshold: float = 50.0,
                    name: str = "congestion") -> Join:
    """The J+ itself: area key, congestion-and-high-flow predicate, one event per pair."""

    def predicate(bus: dict[str, Any], sensor: dict[str, Any]) -> bool:
        return bool(bus["congested"]) and sensor["flow"] > flow_threshold

    def event(bus: dict[str, Any], sensor: dict[str, Any]) -> dict[str, Any]:
        return {"area": bus["area"], "bus": bus["bus"], "bus_ts": bus["ts"],
                "sensor": sensor["sensor"], "sensor_ts": sensor["ts"], "flow": sensor["flow"]}

    return Join(size=window, slide=slide, keys=lambda t: t["area"], predicate=predicate,
                output=event, window_type="single", name=name)


def congestion(buses: Stream, scats: Stream, window: int = 5000, slide: int = 100,
               flow_threshold: float = 50.0) -> Stream:
    """Adds the congestion join of ``buses`` (input 0) and ``scats`` (input 1); returns the
    stream of congestion events ``{"ts", "area", "bus", "bus_ts", "sensor", "sensor_ts",
    "flow"}`` (``ts`` is the right boundary of the window instance that matched the pair)."""
    return buses.oplus(congestion_join(window, slide, flow_threshold), scats)
