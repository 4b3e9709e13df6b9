"""The physical plan shared by the threaded executors: inlets and fused stateless chains.

Every consumer of a stream — an O+ or a sink — reads one *inlet*: a buffer whose sources are
the threads that produce the consumer's inputs (source threads, upstream operator instances)
and whose readers are the consumer's threads. Which buffer is the executor's choice, made by
the ``inlet`` factory of :class:`PhysicalPlan`:

* :class:`Inlet` (the default), an Elastic ScaleGate (the VSN executor). Its items are the
  producers' ``(ts, payload)`` tuples, passed on without copying; for a consumer with several
  inputs the payload is wrapped in :class:`Tagged` with its input index. Control tuples carry
  a :class:`~stretchflow.executors.vsn.Control` payload, watermarks the ``WATERMARK`` marker.
* :class:`SSGInlet`, a Slack ScaleGate (the slack executor, determinism-latency §4.2). Its
  items are ``(ts, payload, input index, t_in)``: the SSGOperator measures each tuple's queue
  delay from ``t_in``, the wall-clock time it was added (Eq. 1), so the index travels as a
  field and no :class:`Tagged` is needed.

Both take a producer's batch through :meth:`Inlet.push_input` and its end through
:meth:`Inlet.close`, so the :class:`Pusher` does not know which buffer it feeds.

Stateless operators never get threads of their own: they run on the thread that produced
their input (STRETCH §7, "stateless operators in a chain run on the upstream threads"). A
:class:`Pusher` applies them to a producer's batches and adds the results to the inlets
downstream, each producer adding under its own source id.

Streams of whole batches (issues #16, #31, #32): an executor that runs batches tells the plan
which nodes' streams may hold :class:`~stretchflow.batch.Batch` items (``batches``, a
:class:`Batches`). A producer of such a stream applies a fused stateless operator in that
stream to each batch at once (:func:`apply_batches`: a columnar form on its table, or a
Python function over its rows), hands batches on to the consumers that take them (a sink, an
O+ taking batches) and turns them into their tuples, in order, for every other one (an O+
that takes tuples, a join): the same tuples, in the same order, as tuple at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from operator import itemgetter
from typing import Any, Protocol

from ..batch import Batch
from ..buffers.esg import ElasticScaleGate
from ..errors import OperatorError
from ..eventtime import WATERMARK
from ..flow import Flow, Node
from ..operators.stateless import apply_batch, over_batch
from ..runtime import pump
from ..sorted_runs import merge_runs

Item = tuple[int, Any]
_ts = itemgetter(0)


class Tagged:
    """A payload bound for input ``i`` of a consumer that has several inputs."""

    __slots__ = ("i", "p")

    def __init__(self, i: int, p: Any):
        self.i = i
        self.p = p


class Inlet:
    """The ESG a consumer reads; the executors' producers add to it under their own ids."""

    def __init__(self, name: str, producers: list[Hashable], readers: list[Hashable],
                 capacity: int, n_inputs: int = 1):
        self.name = name
        self.tagged = n_inputs > 1
        self.esg = ElasticScaleGate(producers, readers, capacity=capacity)

    def push(self, pid: Hashable, items: list[tuple[int, Any]]) -> None:
        """Adds a producer's timestamp-sorted items."""
        self.esg.add_batch(items, pid)

    def push_input(self, pid: Hashable, batch: list[Item], i: int) -> None:
        """Adds a producer's ``(ts, payload)`` batch bound for input ``i`` of the consumer."""
        if self.tagged:
            self.push(pid, [(ts, p if p is WATERMARK else Tagged(i, p)) for ts, p in batch])
        else:
            self.push(pid, batch)

    def push_inputs(self, pid: Hashable, parts: list[tuple[int, list[Item]]]) -> None:
        """Adds one producer's batches bound for several inputs (``(input index, batch)``
        parts, e.g. a self-join) as one timestamp-sorted run: added one after the other they
        would go back in time for the buffer, which keeps one timestamp order per producer."""
        if self.tagged:
            runs = [[(ts, p if p is WATERMARK else Tagged(i, p)) for ts, p in b]
                    for i, b in parts]
        else:
            runs = [b for _, b in parts]
        self.push(pid, merge_runs(runs, _ts))

    def send_control(self, control: Any) -> bool:
        """Adds a control tuple for the readers (addSTRETCH, journal Alg. 5 and §7); False,
        adding nothing, if no reader can get it any more (the input has ended).

        Alg. 5 queues a copy per producer, added before the producer's next tuple and
        stamped with its latest timestamp, so the control tuple queues behind every tuple
        already added, and before it behind the producer's next one. What Theorems 3 and 4
        need is only that every instance gets it at the same position of the same sequence.
        The ESG puts it at once right after the furthest instance's position
        (:meth:`ElasticScaleGate.add_next`): a reconfiguration neither waits for a
        producer's next tuple (forever, for an idle one) nor behind a backlog no instance
        has reached — which, when the reconfiguration provisions instances for a load
        peak, the new instances then help to process."""
        return self.esg.add_next(control) is not None

    # -- membership ----------------------------------------------------------------------------
    def add_producers(self, pids: list[Hashable], j: Hashable) -> bool:
        return self.esg.add_sources(pids, j)

    def remove_producers(self, pids: list[Hashable]) -> bool:
        return self.esg.remove_sources(pids)

    def close(self, pid: Hashable) -> None:
        """A producer's end of input."""
        self.esg.close_source(pid)

    def abort(self, cause: BaseException) -> None:
        """Wakes every thread blocked on the buffer (a run's abort hook)."""
        self.esg.abort(cause)


class InletLike(Protocol):
    """What a :class:`Pusher` and an executor's abort need of an inlet."""

    def push_input(self, pid: Hashable, batch: list[Item], i: int) -> None: ...
    def push_inputs(self, pid: Hashable, parts: list[tuple[int, list[Item]]]) -> None: ...
    def close(self, pid: Hashable) -> None: ...
    def abort(self, cause: BaseException) -> None: ...


#: ``factory(consumer, name, producers, readers, capacity, n_inputs)`` builds the inlet of
#: ``consumer`` (an O+ :class:`Node`, or ``("sink", k)`` for the k-th sink)
InletFactory = Callable[[Any, str, list[Hashable], list[Hashable], Any, int], InletLike]


def esg_inlet(consumer: Any, name: str, producers: list[Hashable], readers: list[Hashable],
              capacity: int, n_inputs: int) -> Inlet:
    """The default inlet factory: an ESG for every consumer."""
    return Inlet(name, producers, readers, capacity, n_inputs)


#: how a :class:`Pusher` hands a producer's items to a target: as they are, their batches
#: as tuples first (a consumer that takes tuples), or a fused operator over whole batches
#: (:func:`apply_batches`: its columnar form, or its function over each batch's rows)
AS_IS, EXPLODE, COLUMNAR = 0, 1, 2


class Pusher:
    """One producer's view of the plan below a node: fused stateless operators, then inlets."""

    def __init__(self, pid: Hashable, targets: list[tuple[str, Any, Any, int]]):
        self.pid = pid
        # ("inlet", Inlet, input index, how) | ("chain", stateless spec, Pusher, how); ``how``
        # is AS_IS, EXPLODE or COLUMNAR (a chain's operator over whole batches)
        self.targets = targets
        # an inlet reached on several paths (a self-join; two stateless branches into one
        # join) gets this producer's batches merged into one run per push (push_inputs)
        reached = [id(inlet) for inlet in self.inlets()]
        self._merge = len(reached) != len(set(reached))

    def push(self, batch: list[Item]) -> None:
        """Sends a batch of ``(ts, payload)`` items (watermarks included) downstream."""
        if not batch:
            return
        if self._merge:
            self._push_merged(batch)
            return
        for kind, target, arg, how in self.targets:
            items = exploded(batch) if how is EXPLODE else batch
            if kind == "inlet":
                target.push_input(self.pid, items, arg)
                continue
            out, err = _through(target, items, how)
            if out:
                arg.push(out)
            if err is not None:  # the outputs before the failing tuple went on first
                raise err

    def _routes(self, batch: list[Item], acc: list[tuple[Any, int, list[Item]]]) -> None:
        """``(inlet, input index, batch)`` for every path of ``batch`` below this pusher."""
        for kind, target, arg, how in self.targets:
            items = exploded(batch) if how is EXPLODE else batch
            if kind == "inlet":
                acc.append((target, arg, items))
                continue
            out, err = _through(target, items, how)
            if out:
                arg._routes(out, acc)
            if err is not None:
                raise err

    def _push_merged(self, batch: list[Item]) -> None:
        acc: list[tuple[Any, int, list[Item]]] = []
        self._routes(batch, acc)
        by_inlet: dict[int, tuple[Any, list[tuple[int, list[Item]]]]] = {}
        for inlet, i, b in acc:
            by_inlet.setdefault(id(inlet), (inlet, []))[1].append((i, b))
        for inlet, parts in by_inlet.values():
            if len(parts) == 1:
                inlet.push_input(self.pid, parts[0][1], parts[0][0])
            else:
                inlet.push_inputs(self.pid, parts)

    def close(self) -> None:
        """The producer's end of input, once per inlet it reaches."""
        done: set[int] = set()
        for inlet in self.inlets():
            if id(inlet) not in done:
                done.add(id(inlet))
                inlet.close(self.pid)

    def inlets(self) -> list[Any]:
        found = []
        for kind, target, arg, _ in self.targets:
            if kind == "inlet":
                found.append(target)
            else:
                found.extend(arg.inlets())
        return found


def exploded(items: list[Item]) -> list[Item]:
    """``items`` with each Batch item replaced by its tuples, in order."""
    if not any(type(p) is Batch for _, p in items):
        return items
    out: list[Item] = []
    for item in items:
        if type(item[1]) is Batch:
            out.extend(item[1].items())
        else:
            out.append(item)
    return out


def _through(op: Any, items: list[Item], how: int) -> tuple[list[Item], BaseException | None]:
    """A fused stateless operator over a producer's items: ``(outputs, error)``."""
    if how is COLUMNAR:
        return apply_batches(op, items)
    return apply_batch(op, items), None


def apply_batches(op: Any, items: list[Item]) -> tuple[list[Item], BaseException | None]:
    """A fused Map, Filter or FlatMap over a producer's items that may hold batches:
    ``(outputs, error)``. Each Batch goes through the operator at once: its columnar form
    where it has one (:func:`~stretchflow.operators.stateless.through_batch`; a batch the
    form refuses goes tuple by tuple through ``fn``, which names the tuple it fails on),
    else its function over the batch's rows in one loop
    (:func:`~stretchflow.operators.stateless.apply_rows`, issue #32); anything else
    (watermarks, tuples) goes through ``fn``. A batch a filter empties is dropped, as its
    tuples would be. ``error``: the failure of a user function naming its tuple, ``outputs``
    then what came before it, which the caller hands on before raising it (as tuple at a
    time)."""
    out: list[Item] = []
    run: list[Item] = []  # non-batch items, in order
    try:
        for item in items:
            p = item[1]
            if type(p) is not Batch:
                run.append(item)
                continue
            if run:
                out.extend(apply_batch(op, run))
                run = []
            b, err = over_batch(op, p)
            if len(b):
                out.append((b.last, b))
            if err is not None:
                return out, err
        if run:
            out.extend(apply_batch(op, run))
    except OperatorError as e:  # apply_batch's, on a tuple of a run: the run's outputs lost
        return out, e
    return out, None


def columnar_form(node: Node) -> bool:
    """Whether ``node`` is a stateless operator with a columnar form (``batch_fn``)."""
    return node.kind == "stateless" and getattr(node.spec, "batch_fn", None) is not None


def one_row_each(node: Node, readers: dict[Node, list[Node | None]]) -> bool:
    """Whether every path of batches from ``node`` to an O+ or a sink keeps at most one row
    per input row: column-expression maps and filters (``select``, ``with_columns``,
    ``filter(expr)``) and O+ whose f_MK is declarative (one key per tuple, the key columns).
    A lambda, a flat_map or a hand-written f_MK (wordcount's tokens) may multiply a batch's
    rows, and with them the memory a batch holds at once."""
    from ..operators.column_forms import DeclForm, form_of
    from ..operators.stateless import Filter, Map

    for r in readers[node]:
        if r is None:
            continue
        spec = r.spec
        if r.kind == "stateless":
            declared = (type(spec) is Map and spec.exprs is not None) or (
                type(spec) is Filter and spec.expr is not None)
            if not declared or not one_row_each(r, readers):
                return False
        elif r.kind != "oplus" or not isinstance(form_of(spec), DeclForm):
            return False
    return True


def readers_of(flow: Flow, *, sinks: bool = True) -> dict[Node, list[Node | None]]:
    """Each node's readers, in the flow's order; with ``sinks``, a None for each sink on it."""
    readers: dict[Node, list[Node | None]] = {node: [] for node in flow.nodes}
    for node in flow.nodes:
        for up in node.inputs:
            readers[up].append(node)
    if sinks:
        for node, _ in flow.sinks:
            readers[node].append(None)
    return readers


def line_readers(nodes: list[Node]) -> dict[Node, list[Node | None]]:
    """The readers of a line (a source, then each node read by the next only)."""
    readers: dict[Node, list[Node | None]] = {n: [] for n in nodes}
    for n, m in zip(nodes, nodes[1:], strict=False):
        readers[n].append(m)
    return readers


def columnar_batch(source: Node, readers: dict[Node, list[Node | None]]) -> int:
    """Tuples a batch of ``source`` holds on the threaded engines (vsn, ordered, sn's
    channels): :data:`~stretchflow.runtime.pump.WIDE_COLUMNAR_BATCH` where no reader can
    multiply its rows (:func:`one_row_each`, a flow of column expressions), else
    :data:`~stretchflow.runtime.pump.COLUMNAR_BATCH` (read at run time: tests shrink both)."""
    return pump.WIDE_COLUMNAR_BATCH if one_row_each(source, readers) else pump.COLUMNAR_BATCH


def stateless_paths(flow: Flow, streams: set[Node]) -> dict[str, str]:
    """The run summary's path of each Map or Filter with a columnar form: ``columnar`` where
    it ran on batches (a batch its form refused went tuple by tuple), else ``tuple``."""
    return {n.name: "columnar" if n in streams else "tuple" for n in flow.nodes
            if columnar_form(n)}


class Batches:
    """Which streams of a plan may hold batches, for an executor that runs them: ``streams``,
    the nodes whose output stream may hold Batch items (sources read in batches, fused
    operators applied to them, O+ taking them), and ``takers``, the O+ that take batches. A
    sink takes them too (the runtime's drain writes a batch at once)."""

    def __init__(self, streams: set[Node], takers: set[Node]):
        self.streams = streams
        self.takers = takers

    def how(self, node: Node, child: Node | None) -> int:
        """How a producer of ``node``'s stream hands it to ``child`` (None: a sink)."""
        if node not in self.streams or child is None:
            return AS_IS
        if child.kind == "stateless":
            return COLUMNAR if child in self.streams else EXPLODE
        return AS_IS if child in self.takers else EXPLODE


class PhysicalPlan:
    """Which threads produce into which inlets, for a Flow whose stateful nodes are O+."""

    def __init__(self, flow: Flow, producer_ids: Callable[[Node], list[Hashable]],
                 reader_ids: Callable[[Node], list[Hashable]], capacity: int | None,
                 inlet: InletFactory = esg_inlet, batches: Batches | None = None):
        self.flow = flow
        self.batches = batches
        self.children: dict[Node, list[tuple[str, Any, int]]] = {n: [] for n in flow.nodes}
        for node in flow.nodes:
            for i, up in enumerate(node.inputs):
                self.children[up].append(("node", node, i))
        for k, (node, sink) in enumerate(flow.sinks):
            self.children[node].append(("sink", sink, k))
        self.producer_ids = producer_ids
        # the producing nodes (sources, O+) whose outputs reach each consumer
        self.inlets: dict[Any, Any] = {}  # what ``inlet`` builds (Inlet by default)
        for node in flow.nodes:
            if node.kind == "oplus":
                self.inlets[node] = inlet(node, node.name, self._producers_of(node),
                                          reader_ids(node), capacity, len(node.inputs))
        for k, (node, sink) in enumerate(flow.sinks):
            self.inlets[("sink", k)] = inlet(("sink", k), f"sink {sink.name}",
                                             self._producers_into(node), [("sink", k)],
                                             capacity, 1)

    def _producers_into(self, node: Node) -> list[Hashable]:
        """Producer ids whose output stream is ``node``'s (through stateless nodes)."""
        if node.kind == "stateless":
            return self._producers_into(node.inputs[0])
        return list(self.producer_ids(node))

    def _producers_of(self, node: Node) -> list[Hashable]:
        out: list[Hashable] = []
        for up in node.inputs:
            for pid in self._producers_into(up):
                if pid not in out:
                    out.append(pid)
        return out

    def pusher(self, node: Node, pid: Hashable) -> Pusher:
        """The pusher a producer of ``node``'s stream uses."""
        targets: list[tuple[str, Any, Any, int]] = []
        bs = self.batches
        for kind, child, i in self.children[node]:
            if kind == "sink":
                targets.append(("inlet", self.inlets[("sink", i)], 0, AS_IS))
                continue
            how = bs.how(node, child) if bs is not None else AS_IS
            if child.kind == "stateless":
                targets.append(("chain", child.spec, self.pusher(child, pid), how))
            else:
                targets.append(("inlet", self.inlets[child], i, how))
        return Pusher(pid, targets)
