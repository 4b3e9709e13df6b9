"""A Spark standalone cluster of separate hosts on one machine: Linux network namespaces.

``with netns_cluster(workers=2) as c:`` makes a bridge in the root namespace and one network
namespace per host — ``master``, ``worker1`` … ``workerN`` and ``driver`` — each joined to
the bridge by a veth pair and holding its own address in a private /24 (``10.231.X.0/24``, X
from the pid, skipping subnets already routed here). Spark's Master and Workers run in their
namespaces (``ip netns exec NS spark-class ...``) bound to their own addresses, so the master,
every worker and the driver talk over the bridge as separate machines would: a shuffle between
two executors crosses it. Each host has its own port space, so the ports are Spark's defaults
(7077, UI 8080/8081, the driver's UI 4040). The root namespace holds the bridge's address
(``.1``) and reaches every host, which is how the caller polls the UIs.

``c.run_on("driver", argv)`` starts a process on a host (the driver: ``stretchflow run ...
--master c.master_url`` with :meth:`NetnsCluster.conf_args`); ``c.kill_worker(i)`` SIGKILLs
worker i's whole process tree (its Worker JVM, the executor it launched, their Python workers:
every process in that namespace, all started here); ``c.start_worker(i)`` brings it back.
Teardown — on exit, an exception or Ctrl-C — kills everything started here, deletes the
namespaces (and with them the veths) and the bridge, and removes the temporary directory
holding the workers' work dirs, local dirs and logs (outside the virtualenv: Spark's default
work dir is inside the pyspark package).

Needs root (CAP_NET_ADMIN) and iproute2's ``ip``: without them :class:`HostsUnavailableError`
says why (the tests skip with that reason).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import EngineUnavailableError
from ..runtime import procfs

MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
DRIVER_UI_PORT = 4040

_counter = itertools.count()


class HostsUnavailableError(EngineUnavailableError):
    """Network namespaces (or the bridge between them) cannot be made here."""


def default_ip() -> str:
    """iproute2's ``ip``: on the PATH, else where Debian puts it (a non-root PATH often
    lacks /usr/sbin)."""
    found = shutil.which("ip")
    if found:
        return found
    return next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.path.exists(p)), "ip")


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root``, from ``/proc``."""
    return procfs.descendants(root)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid: int) -> list[int]:
    """SIGKILLs ``pid`` and its descendants; returns the pids signalled. The tree is frozen
    first (SIGSTOP), so no process forks a child that would escape the second listing."""
    first = [pid, *_descendants(pid)]
    _signal_all(first, signal.SIGSTOP)
    pids = list(dict.fromkeys(first + _descendants(pid)))
    _signal_all(pids, signal.SIGKILL)
    return pids


class NetnsCluster:
    """The hosts, the Spark daemons on them and what the teardown removes; made by
    :func:`netns_cluster`."""

    def __init__(self, workers: int = 2, cores_per_worker: int = 1,
                 worker_memory: str = "1g", executor_memory: str = "512m",
                 ip: str | None = None, timeout: float = 180.0) -> None:
        if workers < 1:
            raise ValueError(f"netns_cluster: workers must be >= 1, got {workers}")
        self.workers, self.cores_per_worker = workers, cores_per_worker
        self.worker_memory, self.executor_memory = worker_memory, executor_memory
        self.ip, self.timeout = ip or default_ip(), timeout
        # interface names are at most 15 characters: "sf" + hex pid (<= 6) + "-" + n + "h9"
        self.name = f"sf{os.getpid():x}-{next(_counter)}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"stretchflow-{self.name}-"))
        self.bridge = f"{self.name}b"
        self.subnet = ""
        self.hosts: dict[str, str] = {}  # host name -> address
        self._ns: dict[str, str] = {}  # host name -> namespace, once made
        self._links: list[str] = []  # root-side links made (the bridge, veth ends)
        self._procs: list[subprocess.Popen] = []
        self._daemons: dict[str, subprocess.Popen] = {}

    # -- addresses ---------------------------------------------------------------------------
    @property
    def master_url(self) -> str:
        return f"spark://{self.hosts['master']}:{MASTER_PORT}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.hosts['master']}:{MASTER_UI_PORT}"

    @property
    def driver_ui(self) -> str:
        """The driver's Spark UI (a run with ``--spark-ui``; one driver at a time)."""
        return f"http://{self.hosts['driver']}:{DRIVER_UI_PORT}"

    def worker_host(self, i: int) -> str:
        if not 1 <= i <= self.workers:
            raise ValueError(f"netns_cluster: no worker {i} (workers are 1..{self.workers})")
        return f"worker{i}"

    def work_dir(self, i: int) -> Path:
        """Worker i's work dir: ``<app id>/<executor id>/stderr`` per executor it ran."""
        return self.tmp / self.worker_host(i) / "work"

    # -- the network -------------------------------------------------------------------------
    def _ip(self, *args: str) -> str:
        cmd = [self.ip, *args]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            raise HostsUnavailableError(
                f"network namespaces unavailable: no `{self.ip}` (iproute2) to make them"
            ) from None
        except (OSError, subprocess.TimeoutExpired) as e:
            raise HostsUnavailableError(
                f"network namespaces unavailable: `{' '.join(cmd)}` failed: {e}") from None
        if r.returncode != 0:
            raise HostsUnavailableError(
                f"network namespaces unavailable: `{' '.join(cmd)}` failed "
                f"(exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()} (making "
                f"namespaces, veths and a bridge needs root or CAP_NET_ADMIN; uid "
                f"{os.geteuid()} here)")
        return r.stdout

    def _pick_subnet(self) -> str:
        used = self._ip("-o", "addr", "show") + self._ip("route", "show", "table", "all")
        start = os.getpid() % 250
        for k in range(250):
            prefix = f"10.231.{(start + k) % 250 + 1}"
            if f"{prefix}." not in used:
                return prefix
        raise HostsUnavailableError("network namespaces: no free 10.231.X.0/24 subnet here")

    def _setup_network(self) -> None:
        self.subnet = self._pick_subnet()
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        self._ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        names = ["master", "driver", *(f"worker{i}" for i in range(1, self.workers + 1))]
        for k, host in enumerate(names):
            addr = f"{self.subnet}.{k + 2}"
            ns, outer, inner = f"{self.name}-{host}", f"{self.name}h{k}", f"{self.name}n{k}"
            self._ip("netns", "add", ns)
            self._ns[host] = ns
            self._ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._links.append(outer)
            self._ip("link", "set", outer, "master", self.bridge)
            self._ip("link", "set", outer, "up")
            self._ip("link", "set", inner, "netns", ns)
            self._ip("-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
            self._ip("-n", ns, "link", "set", inner, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self.hosts[host] = addr

    # -- processes ---------------------------------------------------------------------------
    def host_env(self, host: str, env: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process on ``host``: Spark binds to and advertises the host's
        address (``SPARK_LOCAL_IP``, ``SPARK_LOCAL_HOSTNAME``: the machine's hostname would
        resolve to an address of the root namespace), scratch space and stretchflow's Spark
        log in the cluster's temporary directory, Python workers run this interpreter."""
        from .cluster import daemon_env

        addr = self.hosts[host]
        local = self.tmp / host / "local"
        local.mkdir(parents=True, exist_ok=True)
        logs = self.tmp / "logs"
        logs.mkdir(exist_ok=True)
        out = daemon_env(addr)
        out.update(SPARK_LOCAL_HOSTNAME=addr, SPARK_LOCAL_DIRS=str(local),
                   STRETCHFLOW_SPARK_LOG_DIR=str(logs), PYSPARK_DRIVER_PYTHON=sys.executable)
        out.pop("SPARK_MASTER", None)
        out.update(env or {})
        return out

    def run_on(self, host: str, argv: list[str], env: dict[str, str] | None = None,
               **popen: Any) -> subprocess.Popen:
        """Starts ``argv`` on ``host`` (in its own process group); killed at teardown if it
        still runs. ``env`` adds to :meth:`host_env`."""
        if host not in self._ns:
            raise ValueError(f"netns_cluster: no host {host!r} (hosts: {', '.join(self._ns)})")
        proc = subprocess.Popen([self.ip, "netns", "exec", self._ns[host], *argv],
                                env=self.host_env(host, env), start_new_session=True, **popen)
        self._procs.append(proc)
        return proc

    def _daemon(self, host: str, cls: str, args: list[str]) -> subprocess.Popen:
        from .cluster import spark_home

        log = open(self.tmp / f"{host}.log", "ab")  # noqa: SIM115 (the child holds it)
        try:
            # the daemons need little heap: the executors get spark.executor.memory
            return self.run_on(host, [str(spark_home() / "bin" / "spark-class"), cls, *args],
                               env={"SPARK_DAEMON_MEMORY": "256m"}, stdout=log,
                               stderr=subprocess.STDOUT)
        finally:
            log.close()

    def log_tail(self, host: str, chars: int = 2000) -> str:
        path = self.tmp / f"{host}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _start_master(self) -> None:
        from .cluster import wait_port

        addr = self.hosts["master"]
        proc = self._daemon("master", "org.apache.spark.deploy.master.Master",
                            ["--host", addr, "--port", str(MASTER_PORT),
                             "--webui-port", str(MASTER_UI_PORT)])
        self._daemons["master"] = proc
        try:
            wait_port(MASTER_PORT, proc, "master", self.timeout, host=addr)
            wait_port(MASTER_UI_PORT, proc, "master's UI", self.timeout, host=addr)
        except EngineUnavailableError as e:
            raise EngineUnavailableError(f"{e}; its log: {self.log_tail('master')}") from None

    def start_worker(self, i: int, wait: bool = True) -> None:
        """Starts worker i (again, after :meth:`kill_worker`); ``wait``: until the master
        lists it alive."""
        host = self.worker_host(i)
        old = self._daemons.get(host)
        if old is not None and old.poll() is None:
            raise ValueError(f"netns_cluster: worker {i} is running")
        work = self.work_dir(i)
        work.mkdir(parents=True, exist_ok=True)
        self._daemons[host] = self._daemon(
            host, "org.apache.spark.deploy.worker.Worker",
            [self.master_url, "--host", self.hosts[host], "--cores", str(self.cores_per_worker),
             "--memory", self.worker_memory, "--work-dir", str(work),
             "--webui-port", str(WORKER_UI_PORT)])
        if wait:
            self.wait_workers(lambda alive: self.hosts[host] in alive, f"worker {i} alive")

    def worker_running(self, i: int) -> bool:
        proc = self._daemons.get(self.worker_host(i))
        return proc is not None and proc.poll() is None

    def kill_worker(self, i: int) -> list[int]:
        """SIGKILLs worker i's process tree — its Worker JVM, the executors it launched and
        their Python workers — and every other process in its namespace (all started here);
        returns the pids killed."""
        host = self.worker_host(i)
        proc = self._daemons.get(host)
        pids = kill_tree(proc.pid) if proc is not None and proc.poll() is None else []
        pids += self._kill_namespace(host)
        if proc is not None:
            proc.wait(timeout=30)
        return pids

    def host_pids(self, host: str) -> list[int]:
        """The processes running on ``host`` (in its namespace)."""
        return self._ns_pids(host)

    def _ns_pids(self, host: str) -> list[int]:
        try:
            out = self._ip("netns", "pids", self._ns[host])
        except HostsUnavailableError:
            return []
        return [int(x) for x in out.split()]

    def _kill_namespace(self, host: str) -> list[int]:
        """SIGKILLs every process in ``host``'s namespace and waits (bounded) until none is
        left: a process there can only have been started by this cluster."""
        killed: list[int] = []
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pids = [p for p in self._ns_pids(host) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                killed += kill_tree(pid)
            for p in self._procs:
                p.poll()  # reap our own children, or they stay listed as zombies
            time.sleep(0.1)
        return list(dict.fromkeys(killed))

    def master_state(self) -> dict[str, Any]:
        """The master's JSON status (``/json/``: workers, applications)."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=10) as r:
            return json.load(r)

    def alive_workers(self) -> list[str]:
        """The addresses of the workers the master lists ALIVE."""
        return [w["host"] for w in self.master_state().get("workers", [])
                if w.get("state") == "ALIVE"]

    def wait_workers(self, ok: Any, what: str) -> None:
        """Waits (bounded by the cluster's timeout) until ``ok(alive worker addresses)``."""
        end = time.monotonic() + self.timeout
        alive: list[str] = []
        while time.monotonic() < end:
            try:
                alive = self.alive_workers()
            except OSError:
                alive = []
            if ok(alive):
                return
            dead = [h for h, p in self._daemons.items() if p.poll() is not None]
            if dead:
                raise EngineUnavailableError(
                    f"netns_cluster: the Spark daemon on {dead[0]} exited "
                    f"({self._daemons[dead[0]].returncode}): {self.log_tail(dead[0])}")
            time.sleep(0.5)
        raise EngineUnavailableError(
            f"netns_cluster: no {what} in {self.timeout}s (alive: {alive})")

    # -- the driver's settings ---------------------------------------------------------------
    def driver_conf(self, events: str | os.PathLike | None = None,
                    cores: int | None = None) -> dict[str, str]:
        """Spark settings for a driver on the ``driver`` host: it advertises and binds its own
        address (executors connect back to it), waits until ``cores`` executor cores
        (default: every worker's) have registered — up to 60 s — so the first stage spreads
        over the workers, and writes its event log to ``events`` when given."""
        addr = self.hosts["driver"]
        cores = cores or self.workers * self.cores_per_worker
        conf = {"spark.driver.host": addr, "spark.driver.bindAddress": addr,
                "spark.executor.memory": self.executor_memory,
                "spark.cores.max": str(cores),
                "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
                "spark.ui.port": str(DRIVER_UI_PORT)}
        if events is not None:
            Path(events).mkdir(parents=True, exist_ok=True)
            conf.update({"spark.eventLog.enabled": "true",
                         "spark.eventLog.dir": Path(events).resolve().as_uri(),
                         "spark.eventLog.compress": "false"})
        return conf

    @staticmethod
    def conf_args(conf: dict[str, str]) -> list[str]:
        """``conf`` as ``stretchflow run`` options."""
        return [a for k, v in conf.items() for a in ("--spark-conf", f"{k}={v}")]

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> NetnsCluster:
        self._setup_network()
        from .session import check_java

        check_java()
        self._start_master()
        for i in range(1, self.workers + 1):
            self.start_worker(i, wait=False)
        want = {self.hosts[f"worker{i}"] for i in range(1, self.workers + 1)}
        self.wait_workers(lambda alive: want <= set(alive), f"{self.workers} workers alive")
        return self

    def close(self) -> None:
        """Kills every process started here, deletes the namespaces, veths and bridge and
        removes the temporary directory. Safe to call twice and after a partial start."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                kill_tree(proc.pid)
        for host in list(self._ns):
            self._kill_namespace(host)
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for host, ns in list(self._ns.items()):
            # deleting a namespace destroys the veth end inside it, and so its peer
            subprocess.run([self.ip, "netns", "del", ns], capture_output=True, timeout=30)
            del self._ns[host]
        for link in reversed(self._links):
            subprocess.run([self.ip, "link", "del", link], capture_output=True, timeout=30)
        self._links.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextmanager
def netns_cluster(workers: int = 2, cores_per_worker: int = 1, worker_memory: str = "1g",
                  executor_memory: str = "512m", ip: str | None = None,
                  timeout: float = 180.0) -> Iterator[NetnsCluster]:
    """A master, ``workers`` workers and a driver host, each in its own network namespace;
    everything is removed on exit, however the block ends."""
    c = NetnsCluster(workers, cores_per_worker, worker_memory, executor_memory, ip, timeout)
    try:
        yield c.start()
    finally:
        c.close()


# -- what the driver's event log says (spark.eventLog.enabled) ------------------------------
def read_events(events: str | os.PathLike) -> list[dict[str, Any]]:
    """The events of the one application logged in directory ``events``: a rolling log
    (Spark 4's default: a directory ``eventlog_v2_<app>`` of ``events_<n>_<app>`` files) or
    a single file, finished or ``.inprogress``; an error naming the directory when there is
    not exactly one application."""
    apps = [p for p in Path(events).iterdir() if not p.name.startswith(".")]
    if len(apps) != 1:
        raise ValueError(f"{events}: expected one Spark event log, found "
                         f"{sorted(p.name for p in apps)}")
    app = apps[0]
    if app.is_dir():
        files = sorted((p for p in app.glob("events_*")),
                       key=lambda p: int(p.name.split("_")[1]))
    else:
        files = [app]
    out = []
    for f in files:
        for line in f.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # the last line of a log still being written
    return out


def task_hosts(events: list[dict[str, Any]], since_ms: float = 0) -> dict[str, int]:
    """Successful tasks per executor host (launched at ``since_ms``, epoch ms, or later)."""
    hosts: dict[str, int] = {}
    for e in events:
        if e.get("Event") == "SparkListenerTaskEnd" and \
                e.get("Task End Reason", {}).get("Reason") == "Success" and \
                e["Task Info"].get("Launch Time", 0) >= since_ms:
            h = e["Task Info"]["Host"]
            hosts[h] = hosts.get(h, 0) + 1
    return hosts


def remote_shuffle_bytes(events: list[dict[str, Any]]) -> int:
    """Shuffle bytes successful tasks fetched from another executor's host."""
    return sum(e.get("Task Metrics", {}).get("Shuffle Read Metrics", {})
               .get("Remote Bytes Read", 0) for e in events
               if e.get("Event") == "SparkListenerTaskEnd"
               and e.get("Task End Reason", {}).get("Reason") == "Success")


def failed_tasks(events: list[dict[str, Any]]) -> list[str]:
    """The end reasons of tasks that did not succeed (ExecutorLostFailure, FetchFailed...)."""
    return [e["Task End Reason"]["Reason"] for e in events
            if e.get("Event") == "SparkListenerTaskEnd"
            and e.get("Task End Reason", {}).get("Reason") != "Success"]


def added_executors(events: list[dict[str, Any]]) -> dict[str, str]:
    """Executor id -> host of every executor that registered with the driver, in order."""
    return {e["Executor ID"]: e["Executor Info"]["Host"] for e in events
            if e.get("Event") == "SparkListenerExecutorAdded"}


def removed_executors(events: list[dict[str, Any]]) -> list[str]:
    """Why executors were removed while the application ran (a lost worker's says so)."""
    return [str(e.get("Removed Reason")) for e in events
            if e.get("Event") == "SparkListenerExecutorRemoved"]


def _ui_get(ui: str, path: str) -> Any:
    with urllib.request.urlopen(f"{ui}/api/v1/{path}", timeout=5) as r:
        return json.load(r)


def executor_hosts(ui: str) -> list[str]:
    """The hosts of the live executors of the driver whose UI is at ``ui``."""
    app = _ui_get(ui, "applications")[0]["id"]
    return [x["hostPort"].split(":")[0] for x in _ui_get(ui, f"applications/{app}/executors")
            if x["id"] != "driver" and x.get("isActive", True)]


def wait_executor(ui: str, host: str, timeout: float = 120.0) -> None:
    """Waits until the driver whose UI is at ``ui`` has a live executor on ``host`` (one the
    master launched for it on a worker that came back)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if host in executor_hosts(ui):
                return
        except (OSError, IndexError, KeyError, ValueError):
            pass  # the UI is not up yet
        time.sleep(0.5)
    raise RuntimeError(f"no executor on {host} within {timeout}s (driver UI {ui})")
