"""Process channels for the SN executor (``channels="processes"``).

Each channel is a process of a ``multiprocessing`` context (``forkserver`` by default, or
``spawn``; never ``fork``, which is unsafe once threads run) driving the same
:class:`~stretchflow.executors.sn_channel.ChannelCore` as a thread channel, so processSN
(STRETCH Alg. 2) and the channel's side of the migration protocol (elastic-scaling Alg. 4) are
shared code. What this module adds is the transport:

* **Shipping the O+.** User functions are often lambdas or closures, which the standard pickle
  cannot send, so the O+ spec travels by cloudpickle (the ``cloudpickle`` package, or the copy
  bundled with pyspark); one that cannot be pickled stops the run before it starts with a
  :class:`FlowDefinitionError` naming the operator.
* **Batches.** The splitter's per-channel batches (lists of tuples) go through one bounded
  ``multiprocessing`` queue per channel, pickled once per batch; the bound is the flow control
  whose blocking the congestion index measures. Each channel answers on its own bounded
  queue; a relay thread per channel in the parent forwards outputs to the merger and
  migration replies to the splitter, in the order the channel sent them.
* **Stable key groups.** ``hash(str)`` is salted per process, so the splitter and the channel
  processes would disagree on a key's group. Both use
  :func:`~stretchflow.elastic.consistent_hash.stable_hash` instead: the splitter directly, the
  channels through :func:`stable_instance`, the operator's own instance class with an f_μ
  lookup that uses it (``operators/oplus.py`` itself keeps ``hash``, right for threads of
  one process).
* **Migration** (Alg. 4) through an SQLite backing store that every process opens by path:
  the splitter sends ``migrate`` to every old and new channel; each releases its held outputs,
  donates the groups it loses and replies ``donated``; once all replied (the vertical barrier)
  the splitter sends ``collect`` to the channels that stay and ``leave`` to the others, and
  waits for every ``collected`` and every ``left`` (the horizontal barrier, over
  max(N_old, N_new) channels as in the paper) before it resumes. ``left`` is the relay's word
  that the channel's ``leave`` is in the merger's queue: a later migration may start a new
  channel with the same index, and its ``join`` must reach the merger after that ``leave``,
  or the merger would drop the new channel's watermark and release outputs too early.
* **Failures.** A channel that raises sends the error to the parent, which raises the same
  exception there (an :class:`OperatorError` keeps its operator, timestamp and payload; the
  child's traceback is attached as a note). A channel that dies without a word (killed,
  crashed) is noticed by its relay thread. Either way the run stops, every channel process is
  terminated and nothing waits forever.
* **Parent death.** A channel dies with the parent process, even a SIGKILLed one that cleans
  nothing up: a watch thread blocks on the parent's sentinel (a pipe only the parent holds)
  and exits the process the moment it closes, and on Linux the kernel also sends SIGKILL
  when the process that forked the channel dies (``PR_SET_PDEATHSIG``; under ``forkserver``
  that is the fork server, which itself exits once the parent and every channel are gone).
  The resource tracker then sees its last client go and unlinks the queues' semaphores; the
  fork server's socket lives in a ``stretchflow-mp-<pid>-*`` directory that the next run
  sweeps when process ``<pid>`` is dead (:mod:`stretchflow.runtime.tempdirs`). Channels
  ignore SIGINT: a Ctrl-C reaches the whole process group, and it is the parent that stops
  the run and ends them.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..elastic.consistent_hash import stable_hash
from ..elastic.migration import SQLiteStateStore
from ..errors import FlowDefinitionError, OperatorError, SourceError
from ..operators.oplus import OPlus, OPlusInstance, SharedState, key_pairs
from ..runtime import Stopped
from ..runtime.script_main import main_not_rerun, unguarded_call
from ..runtime.signals import signals_deferred
from ..runtime.tempdirs import use_own_mp_tempdir
from .sn_channel import ChannelCore

__all__ = ["ProcessTransport", "StableGroupRoute", "channel_io", "import_error",
           "report_error", "ship", "stable_group_function", "stable_instance"]

_PARENT_CHECK = 1.0  # seconds a channel process waits before checking that its parent lives
_WAIT = 0.1  # seconds the parent waits on a reply before checking whether the run stopped
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _cloudpickle() -> Any:
    try:
        import cloudpickle
    except ImportError:  # pyspark bundles a copy
        from pyspark import cloudpickle
    return cloudpickle


def ship(op: OPlus) -> bytes:
    """The O+ spec as bytes a channel process can load (cloudpickle: lambdas and closures
    included), or a :class:`FlowDefinitionError` naming the operator."""
    try:
        return _cloudpickle().dumps(op, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - whatever the pickler objects to
        raise FlowDefinitionError(
            f"the sn engine cannot ship operator {op.name!r} to a channel process "
            f"(channels='processes'): {type(e).__name__}: {e}; use channels='threads' or "
            "make its functions and captured values picklable") from e


def _preload_modules(ops: list[OPlus]) -> list[str]:
    names = [__name__, "stretchflow.queries"]
    for op in ops:
        names.append(type(op).__module__)
        for value in vars(op).values():
            mod = getattr(value, "__module__", None) if callable(value) else None
            if isinstance(mod, str) and mod != "__main__" and mod in sys.modules:
                names.append(mod)
    return list(dict.fromkeys(names))


def stable_group_function(n_groups: int) -> Callable[[Any], int]:
    """``key -> stable_hash(key) % n_groups``, the same in every process, memoized (keys
    repeat, and blake2 over the key's canonical bytes costs far more than a dict lookup)."""

    @functools.lru_cache(maxsize=1 << 16)
    def group_of(key: Any) -> int:
        try:
            return stable_hash(key) % n_groups
        except TypeError as e:  # a key type with no process-independent encoding
            raise FlowDefinitionError(
                f"the sn engine's process channels cannot place key {key!r} of type "
                f"{type(key).__name__} in a key group: {e}; use channels='threads', or keys "
                "made of those types") from e

    return group_of


class StableGroupRoute:
    """Mixin over an :class:`OPlusInstance` class: key groups from a process-independent hash.

    Operators may specialize their instances (``op.instance`` returns e.g. an
    ``AggregateInstance``); :func:`stable_instance` keeps that class and only swaps the f_μ
    lookup, which every instance class reaches through ``_route``."""

    _group_of: Callable[[Any], int]

    def _route(self, ks: Any, value: Any) -> list[tuple[Any, Any, int, dict]]:
        # OPlusInstance._route with stable groups (f_μ by group, as the splitter routes)
        pairs = key_pairs(ks, value)
        assign, group_of = self.assign, self._group_of  # type: ignore[attr-defined]
        j, groups, hits = self.j, self.groups, self.group_hits  # type: ignore[attr-defined]
        out = []
        for k, v in pairs:
            g = group_of(k)
            if assign[g] == j:
                out.append((k, v, g, groups[g]))
                if hits is not None:
                    hits[g] += 1
        return out


@functools.cache
def _stable_class(cls: type) -> type:
    return type(f"StableGroup{cls.__name__}", (StableGroupRoute, cls), {})


def stable_instance(op: OPlus, sigma: SharedState, j: int, assign: list[int],
                    group_of: Callable[[Any], int]) -> OPlusInstance:
    """``op.instance(sigma, j, assign)`` routing keys to groups with ``group_of``."""
    inst = op.instance(sigma, j, assign)
    inst.__class__ = _stable_class(type(inst))
    inst._group_of = group_of  # type: ignore[attr-defined]
    # the instance may have indexed σ by group already: σ is empty at this point, so there
    # is nothing to re-route
    return inst


# -- errors across the process boundary --------------------------------------------------------
def _exc_blob(e: BaseException | None) -> tuple:
    if e is None:
        return ("none",)
    try:
        blob = pickle.dumps(e)
        pickle.loads(blob)  # some exceptions pickle but cannot be rebuilt
        return ("pickle", blob)
    except Exception:  # noqa: BLE001
        return ("text", type(e).__name__, str(e))


def _exc_from(blob: tuple) -> BaseException | None:
    if blob[0] == "none":
        return None
    if blob[0] == "pickle":
        return pickle.loads(blob[1])
    # an exception type the parent cannot rebuild: same name and message, so the
    # OperatorError text built from it reads exactly as in the channel
    return type(blob[1], (Exception,), {})(blob[2])


def _picklable(value: Any) -> Any:
    try:
        pickle.dumps(value)
        return value
    except Exception:  # noqa: BLE001
        return repr(value)


def _export(e: BaseException) -> tuple:
    tb = traceback.format_exc()
    if isinstance(e, OperatorError):
        return ("operator", e.operator, e.ts, _picklable(e.payload), _exc_blob(e.__cause__), tb)
    if isinstance(e, SourceError):  # its arguments are not its args: pickle cannot rebuild it
        return ("source", e.source, e.where, e.reason, _picklable(e.record), tb)
    return ("other", _exc_blob(e), tb)


def import_error(j: int, data: tuple) -> BaseException:
    """The exception a channel exported (``_export``), rebuilt in the parent, with the
    channel's traceback as a note."""
    if data[0] == "operator":
        _, name, ts, payload, cause_blob, tb = data
        cause = _exc_from(cause_blob) or RuntimeError("unknown cause")
        err: BaseException = OperatorError(name, ts, payload, cause)
        err.__cause__ = cause
    elif data[0] == "source":  # a bad record of lines a channel parsed (sn_raw_lines)
        *args, tb = data[1:]
        err = SourceError(*args)
    else:
        _, blob, tb = data
        err = _exc_from(blob) or RuntimeError(f"sn channel process {j} failed")
    err.add_note(f"raised in sn channel process {j}:\n{tb}")
    return err


# -- messages are pickled by the sender, not by the queue's feeder thread ---------------------
# A multiprocessing queue pickles in a background thread that only prints an error and drops
# the message if it cannot be pickled: a lost batch (or a lost output) would go unnoticed.
# Pickling in the sending thread turns that into an ordinary exception that stops the run.
def _dumps(msg: Any) -> bytes:
    return pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)


class _PickledQueue:
    """The splitter's end of a channel's input queue: put/put_nowait pickle once."""

    def __init__(self, q: Any):
        self.q = q
        self._pending: tuple[Any, bytes] | None = None  # put_nowait found the queue full

    def put_nowait(self, msg: Any) -> None:
        data = _dumps(msg)
        try:
            self.q.put_nowait(data)
        except queue.Full:
            self._pending = (msg, data)  # the blocking retry reuses the bytes
            raise

    def put(self, msg: Any, timeout: float | None = None) -> None:
        pending = self._pending
        data = pending[1] if pending is not None and pending[0] is msg else _dumps(msg)
        self.q.put(data, timeout=timeout)
        self._pending = None


# -- the channel process -----------------------------------------------------------------------
def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Asks Linux to send ``sig`` to this process when the thread that forked it ends
    (``prctl(PR_SET_PDEATHSIG)``); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(poll: float = _PARENT_CHECK) -> threading.Thread:
    """A daemon thread that ends this process (``os._exit``: no exit handlers, which could
    block on a queue nobody reads) as soon as the multiprocessing parent is gone: it blocks on
    the parent's sentinel, or polls ``os.getppid()`` where there is none."""
    parent = mp.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    ppid = os.getppid()

    def watch() -> None:
        if sentinel is not None:
            from multiprocessing.connection import wait
            wait([sentinel])
        else:
            while os.getppid() == ppid:
                threading.Event().wait(poll)
        os._exit(1)

    t = threading.Thread(target=watch, name="sn-parent-watch", daemon=True)
    t.start()
    return t


def channel_io(inq: Any, outq: Any, pdeathsig: bool = True
               ) -> tuple[Callable[[Any], None], Callable[[], Any]]:
    """A channel process's start (SIGINT ignored, death with the parent) and its two ends:
    ``put(msg)`` pickles and sends a reply, ``get()`` takes the next message; both give up
    (``SystemExit``) once the parent is gone. Shared by the tuple channel below and the
    columnar one (:mod:`.sn_columnar`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the run (module doc)
    if pdeathsig:
        set_parent_death_signal()
    watch_parent()
    parent = mp.parent_process()

    def orphaned() -> bool:
        return parent is not None and not parent.is_alive()

    def put(msg: Any) -> None:
        data = _dumps(msg)
        while True:
            try:
                outq.put(data, timeout=_PARENT_CHECK)
                return
            except queue.Full:
                if orphaned():
                    raise SystemExit(1) from None

    def get() -> Any:
        while True:
            try:
                return pickle.loads(inq.get(timeout=_PARENT_CHECK))
            except queue.Empty:
                if orphaned():
                    raise SystemExit(1) from None

    return put, get


def report_error(put: Callable[[Any], None], j: int, e: BaseException) -> None:
    """Sends a channel's error to the parent (which stops the run), if it still can."""
    try:
        put(("error", j, _export(e)))
    except BaseException:  # noqa: BLE001 - the parent is gone or the queue broke
        pass


def _channel_main(blob: bytes, j: int, n_groups: int, assign: list[int], store_path: str,
                  inq: Any, outq: Any, pdeathsig: bool = True) -> None:
    """A channel process: processSN on its key groups until ``end`` or ``leave``."""
    put, get = channel_io(inq, outq, pdeathsig)
    store: SQLiteStateStore | None = None
    try:
        op = pickle.loads(blob)
        core = ChannelCore(j, op, stable_instance(op, SharedState(n_groups), j, assign,
                                                  stable_group_function(n_groups)))
        put(("ready", j))  # the O+ and the modules its functions need are loaded
        while True:
            msg = get()
            kind = msg[0]
            if kind == "batch":
                put(core.batch(msg))
            elif kind == "barrier":  # a checkpoint: the snapshot goes back with the outputs
                put(core.snap(msg[1]))
            elif kind == "restore":
                core.restore(msg[1])
            elif kind == "migrate":  # Alg. 4: release held outputs, donate, then wait
                _, epoch, old, new = msg
                out = core.release()
                if out is not None:
                    put(out)
                if store is None:
                    store = SQLiteStateStore(store_path)
                nbytes, moved = core.donate(store, epoch, old, new)
                put(("donated", j, nbytes, moved))
            elif kind == "collect":  # past the vertical barrier
                _, epoch, old, new = msg
                if store is None:
                    store = SQLiteStateStore(store_path)
                core.collect(store, epoch, old, new)
                put(("collected", j))
            elif kind == "leave":
                put(("leave", j))
                return
            else:  # "end"
                put(core.end(msg[1]))
                return
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        report_error(put, j, e)
        raise SystemExit(1) from None
    finally:
        if store is not None:
            store.close()


# -- the parent's side -------------------------------------------------------------------------
class ProcessTransport:
    """Starts channel processes for one run and runs Alg. 4 with them (see module doc)."""

    #: what a channel process runs (:mod:`.sn_columnar`'s transport runs its own)
    main = staticmethod(_channel_main)

    def __init__(self, op: OPlus, n_groups: int, start_method: str = "forkserver",
                 preload: list[OPlus] | None = None):
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(f"process channels start with 'forkserver' or 'spawn', not "
                             f"{start_method!r} (fork is unsafe once threads run)")
        self.blob = ship(op)
        self.G = n_groups
        self.group_of = stable_group_function(n_groups)
        self.ctx = mp.get_context(start_method)
        self.start_method = start_method
        self.owner = threading.get_ident()  # the thread that runs (and outlives) the channels
        # a script running this at its top level, unguarded: its channels must not run it again
        self.unguarded = unguarded_call()
        if start_method == "forkserver":
            use_own_mp_tempdir()  # the server's socket: in a directory a later run can sweep
            # the server imports the engine and the modules the O+'s functions come from once
            # (only when it starts: the first run of this process); each channel is then a
            # cheap fork of it instead of a fresh interpreter importing them again; with several
            # O+ (one transport each) every transport names the modules of all of them, as
            # the preload list is the server's, not a transport's
            self.ctx.set_forkserver_preload(_preload_modules(preload or [op]))
        self.ctlq: queue.Queue = queue.Queue()  # "donated" / "collected" replies
        self.ex: Any = None

    def open(self, ex: Any) -> None:
        self.ex = ex
        self.store_path = ex.store.path

    def channel(self, ex: Any, j: int) -> ProcessChannel:
        return ProcessChannel(self, ex, j)

    def wait_ready(self, ex: Any) -> None:
        """Blocks until every running channel has loaded the O+ (imports can take a while
        in a fresh process), so the run's first measurements are not start-up time."""
        for ch in list(ex.channels.values()):
            while not ch.ready.wait(_WAIT):
                if ex.run.stop.is_set():
                    raise Stopped

    def migrate(self, ex: Any, epoch: int, old: list[int], new: list[int], old_p: int,
                p: int) -> tuple[int, int]:
        """Alg. 4 from the splitter: pulse, vertical barrier, collect/leave, wait for all."""
        run = ex.run
        participants = max(old_p, p)
        for j in range(participants):
            run.put(ex.channels[j].q, ("migrate", epoch, old, new))
        nbytes = moved = 0
        for _ in range(participants):  # the vertical barrier: every donation is stored
            msg = run.get(self.ctlq)
            if msg[0] != "donated":
                raise RuntimeError(f"sn migration {epoch}: unexpected reply {msg[0]!r}")
            nbytes += msg[2]
            moved += msg[3]
        for j in range(participants):
            run.put(ex.channels[j].q, ("collect", epoch, old, new) if j < p else ("leave",))
        # the horizontal barrier spans the leaving channels too: each one's "leave" must be in
        # the merger's queue before the splitter goes on (its next migration may put a "join"
        # for the same index there; see the module doc)
        want = {"collected": p, "left": participants - p}
        for _ in range(participants):
            msg = run.get(self.ctlq)
            if want.get(msg[0], 0) <= 0:
                raise RuntimeError(f"sn migration {epoch}: unexpected reply {msg[0]!r}")
            want[msg[0]] -= 1
        return nbytes, moved


class ProcessChannel:
    """One channel process, its two queues, and the relay thread reading its replies."""

    def __init__(self, transport: ProcessTransport, ex: Any, j: int):
        ctx = transport.ctx
        self.j = j
        self.transport = transport
        self.run = ex.run
        self.outq = ex.outq
        self.inq = ctx.Queue(maxsize=ex.queue_size)
        self.q = _PickledQueue(self.inq)  # what the splitter puts to
        self.resq = ctx.Queue(maxsize=ex.queue_size * 4)
        # PR_SET_PDEATHSIG fires when the forking *thread* ends: the fork server's main
        # thread, or under spawn this thread, which is safe only if it outlives the channel
        # (the run's own thread does; a splitter starting a channel in a migration does not)
        pdeathsig = (transport.start_method == "forkserver"
                     or threading.get_ident() == transport.owner)
        self.proc = ctx.Process(
            target=transport.main, name=f"sn-channel-{j}", daemon=True,
            args=(transport.blob, j, transport.G, list(ex.assign), transport.store_path,
                  self.inq, self.resq, pdeathsig))
        self.relay = ex.run.thread(self._relay, name=f"sn-relay-{ex.name}-{j}")
        self.threads = [self.relay]
        self.ready = threading.Event()

    def start(self) -> None:
        # a signal mid-start would orphan a half-started child
        with signals_deferred(), main_not_rerun(self.transport.unguarded is not None):
            self.proc.start()
        # The channel holds its own copy of the reply pipe's write end now. Dropping the
        # parent's makes the channel the only writer, so its death reads as end of file: a
        # channel killed in the middle of a reply (terminated after a failure, or a SIGTERM
        # to the process group) would otherwise leave the relay blocked forever in a read of
        # the rest of that message, and the run waiting for the relay.
        writer = getattr(self.resq, "_writer", None)  # multiprocessing.Queue's, since 3.0
        if writer is not None:
            writer.close()
        self.relay.start()
        # a failed run must not wait for a channel busy with a long batch: stop it at once
        self.run.on_abort(lambda _e: self._terminate())

    def _terminate(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()

    def close(self, failed: bool) -> None:
        """Waits for the process to exit (terminates it after a failure or a timeout) and
        drops the queues without waiting on data nobody will read."""
        if self.proc.pid is not None:  # started
            self._stop_process(failed)
        for q in (self.inq, self.resq):
            q.cancel_join_thread()  # a feeder blocked on a dead reader must not hang exit
            q.close()

    def _stop_process(self, failed: bool) -> None:
        self.proc.join(timeout=0.2 if failed else 10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()

    def _died(self) -> RuntimeError:
        self.proc.join(timeout=1.0)  # for its exit code
        return RuntimeError(f"sn channel process {self.j} exited (code {self.proc.exitcode}) "
                            "without finishing its work")

    def _explain(self, err: BaseException) -> BaseException:
        """A channel started without the unguarded script (:mod:`..runtime.script_main`)
        that could not load a record's class defined in it: say what to change, in one
        line, instead of pickle's ``Can't get attribute``."""
        where = self.transport.unguarded
        if where is None or not (isinstance(err, AttributeError)
                                 and "<module '__main__'" in str(err)):
            return err
        path, line = where
        return FlowDefinitionError(
            f"{os.path.basename(path)}: line {line}: flow.run() is not under "
            f"`if __name__ == \"__main__\":`, so sn channel process {self.j} started without "
            f"running the script again and cannot load what a record holds ({err}); put the "
            f"run under that guard")

    def _relay(self) -> None:
        run, resq, j = self.run, self.resq, self.j
        while True:
            try:
                msg = pickle.loads(resq.get(timeout=_WAIT))
            except queue.Empty:
                if run.stop.is_set():
                    return
                if self.proc.is_alive() or self.proc.exitcode is None:
                    continue
                try:  # it exited: what it sent last may still be in the pipe
                    msg = pickle.loads(resq.get(timeout=1.0))
                except (queue.Empty, EOFError, OSError):
                    raise self._died() from None
            except (EOFError, OSError):  # end of file (mid-message: OSError): it is gone
                if run.stop.is_set():
                    return
                raise self._died() from None
            kind = msg[0]
            if kind == "error":
                run.fail(self._explain(import_error(j, msg[2])))
                return
            if kind == "ready":
                self.ready.set()
                continue
            if kind == "donated" or kind == "collected":
                self.transport.ctlq.put(msg)
                continue
            run.put(self.outq, msg)
            if kind == "leave":  # in the merger's queue now: the migration may go on
                self.transport.ctlq.put(("left", j))
                return
            if kind == "final" or kind == "failed":  # its last word (failed: sn_columnar)
                return
