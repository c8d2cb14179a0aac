"""Judging on a Dask distributed cluster: GPU workers on other hosts, the store on this one.

Why Dask and not Ray: both schedule Python functions over hosts with declared resources and
re-run the tasks of a worker that went away; Dask's wheels (dask, distributed) are small and
pure Python, while Ray's wheel is about 79 MB, more than can be carried to the GPU machines
this project is measured on. Only the project needs installing on each host (`.[cluster]`).

A cluster for PTXBench is a scheduler and one Dask worker per GPU, each declaring the GPU as a
resource (`dask worker tcp://HOST:8786 --nworkers 1 --resources GPU=1`, with
CUDA_VISIBLE_DEVICES naming its GPU). A judging job asks for `GPU=1`, so a worker judges one
candidate at a time. Each worker process keeps one long-lived `Runner` (one GPU worker
process, engine/runner.py; services/cluster_worker.py is the worker's side), so a job does not
pay a worker start.

What comes back is a `JudgeOutcome` (services/dispatch.py); the submitting process writes the
rows (services/parallel.py, the single writer). A worker that goes away has its jobs re-run by
Dask on another worker; a job whose result had already come back can come back twice, and the
writer keeps the first (one attempt key per sample and batch). A job's stage events travel with
its result and are said when it arrives, before its row.

A stop withdraws the jobs no worker has begun and waits for the running ones (each job says on a
Dask event topic when it begins: services/cluster_worker.py), so their rows are written;
`abandon` drops them too.

`address` is `tcp://host:port`, or `local[:N]` for a LocalCluster of N worker processes on this
host, each declaring GPU=1 (tests and benchmarks; N defaults to the number of visible GPUs, at
least 1). dask is imported only here, only when a cluster is asked for.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from concurrent.futures import Future
from typing import Any

from ptxbench.services import progress as ev
from ptxbench.services.dispatch import BackendUnavailable, JudgeOutcome, JudgeRequest
from ptxbench.services.pool import withdraw

RESOURCE = "GPU"
START_TIMEOUT_S = 600.0  # the first job of each worker starts its GPU worker (torch, CUDA context)
CONNECT_TIMEOUT_S = 30.0

# -- the submitting side --------------------------------------------------------------------------


def parse_address(address: str) -> tuple[str, int | None]:
    """`tcp://host:port` → ("tcp", None) with the address kept; `local[:N]` → ("local", N or None)."""
    from ptxbench.services.errors import UsageError

    address = address.strip()
    if address == "local" or address.startswith("local:"):
        n = address.partition(":")[2]
        if n and not (n.isdigit() and int(n) >= 1):
            raise UsageError(f"--cluster {address}: local:N needs a worker count of at least 1")
        return "local", int(n) if n else None
    if re.fullmatch(r"(tcp|tls|ws|wss|inproc)://[^\s]+", address):
        return "remote", None
    raise UsageError(f"--cluster {address!r}: give the scheduler's address (tcp://host:8786) or local[:N]")


LOCAL_HOST = "127.0.0.1"


def local_cluster_options(n_workers: int) -> dict[str, Any]:
    """A `local` cluster's LocalCluster arguments: every listener on loopback and no dashboard. The
    scheduler, the workers and their nannies bind to LOCAL_HOST (named, not left to Dask's default);
    the dashboards, which would show the jobs to anyone who can reach them, are off. The scheduler
    keeps the small HTTP server Dask always starts (health, metrics): on LOCAL_HOST, at a free port,
    where a port alone (":0", the old setting) would listen on every interface."""
    return {
        "n_workers": n_workers,
        "threads_per_worker": 1,
        "processes": True,
        "resources": {RESOURCE: 1},
        "host": LOCAL_HOST,
        "protocol": "tcp://",
        "dashboard_address": None,
        "worker_dashboard_address": None,
        "scheduler_kwargs": {"dashboard": False, "dashboard_address": f"{LOCAL_HOST}:0"},
    }


class DaskBackend:
    """A parallel batch's Backend (services/dispatch.py) on a Dask cluster."""

    def __init__(self, address: str, *, local_workers: int | None = None) -> None:
        self.kind, n = parse_address(address)
        self.address = address
        self.local_workers = local_workers or n
        self.events: queue.SimpleQueue[ev.Event] = queue.SimpleQueue()
        self.static_only = False
        self.client: Any = None
        self.cluster: Any = None
        self._known: dict[str, dict[str, Any]] = {}  # worker address -> identity
        self._futures: dict[Any, tuple[JudgeRequest, Future[JudgeOutcome]]] = {}
        self._began: dict[str, float] = {}  # attempt -> when a worker said it began it (this side's clock)
        self._lock = threading.Lock()
        self._closing = False
        self._last_poll = 0.0
        self._worker_side: Any = None

    # -- Backend -------------------------------------------------------------------------------

    def start(self, archs: set[str], static_only: bool) -> list[ev.WorkerChanged]:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise BackendUnavailable(
                "--cluster needs Dask distributed: pip install 'ptxbench[cluster]' (dask, distributed)"
            ) from None
        from ptxbench.services import cluster_worker

        self._worker_side = cluster_worker
        self.static_only = static_only
        try:
            if self.kind == "local":
                n = self.local_workers or max(1, _visible_gpu_count())
                self.cluster = LocalCluster(**local_cluster_options(n))
                self.client = Client(self.cluster, set_as_default=False)
            else:
                self.client = Client(self.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise BackendUnavailable(f"cannot reach the Dask scheduler at {self.address}: {exc}") from None
        self._register_plugin()
        self.client.subscribe_topic(cluster_worker.BEGAN, self._job_began)  # before any job can begin
        workers = self._gpu_workers()
        if not workers:
            self.close()
            raise BackendUnavailable(
                f"no Dask worker at {self.address} declares a {RESOURCE} resource "
                f"(start each with: dask worker ADDRESS --nworkers 1 --resources {RESOURCE}=1)"
            )
        started = self._identify(workers)
        if not started:
            reasons = "; ".join(f"{i['name']}: {i['error']}" for i in self._known.values() if i.get("error"))
            self.close()
            raise BackendUnavailable("no GPU worker of the cluster could start: " + reasons[:1500])
        self._last_poll = time.monotonic()
        return started

    def submit(self, req: JudgeRequest) -> Future[JudgeOutcome]:
        out: Future[JudgeOutcome] = Future()
        fut = self.client.submit(
            self._worker_side.judge_on_worker,
            req,
            self.static_only,
            key=f"ptxbench-judge-{req.attempt}",
            resources={RESOURCE: 1},
            pure=False,
            retries=0,
        )
        with self._lock:
            self._futures[fut] = (req, out)
        fut.add_done_callback(self._arrived)  # called on a thread of the client's
        return out

    def capacity(self) -> int:
        self._poll()
        return 2 * max(1, len(self._gpu_workers()))

    def alive(self) -> bool:
        return True  # a cluster without workers waits for one (Dask keeps the jobs); the caller can stop it

    def cancel_pending(self) -> None:
        """Withdraw the jobs no worker has begun: left unjudged for a resume. A job that began but whose
        event is still on its way is withdrawn too (its sample is judged again on resume)."""
        with self._lock:
            items = [(fut, entry) for fut, entry in self._futures.items() if entry[0].attempt not in self._began]
            for fut, _entry in items:
                del self._futures[fut]
        self._withdraw(items)

    def running(self) -> dict[str, float]:
        with self._lock:
            pending = {req.attempt for req, _out in self._futures.values()}
            return {a: t for a, t in self._began.items() if a in pending}

    def abandon(self) -> None:
        """Withdraw every job not answered, the running ones too (a worker finishes its job; the answer is dropped)."""
        with self._lock:
            items = list(self._futures.items())
            self._futures.clear()
        self._withdraw(items)

    @staticmethod
    def _withdraw(items: list[tuple[Any, tuple[JudgeRequest, Future[JudgeOutcome]]]]) -> None:
        for fut, (_req, out) in items:
            fut.cancel()
            withdraw(out)

    def shared(self, outcome: JudgeOutcome) -> int:
        return int(outcome.extra.get("workers_on_gpu", 1))

    def _on_gpu(self, key: str | None) -> int:
        """How many live workers judge on the physical GPU `key`."""
        if key is None:
            return 1
        return max(1, sum(1 for i in self._known.values() if i.get("gpu") == key and not i.get("lost")))

    def device_label(self) -> str | None:
        names = sorted({i["device"] for i in self._known.values() if i.get("device")})
        where = f"Dask {self.address}"
        return f"{', '.join(names)} ({where})" if names else where

    def close(self) -> None:
        self._closing = True
        self.abandon()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # a scheduler already gone: nothing to close
                pass
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:  # workers already gone
                pass
        self.client = self.cluster = None

    # -- inside --------------------------------------------------------------------------------

    def _register_plugin(self) -> None:
        try:
            plugin = self._worker_side.RunnerPlugin()
            self.client.register_plugin(plugin, name=plugin.name)
        except Exception as exc:  # an older scheduler: jobs still run, the Runner is closed with its process
            self.events.put(ev.Log("warning", f"the worker plug-in was not registered: {exc}"[:500]))

    def _gpu_workers(self) -> dict[str, dict[str, Any]]:
        info = self.client.scheduler_info(n_workers=-1) if self.client is not None else {}
        return {a: w for a, w in info.get("workers", {}).items() if (w.get("resources") or {}).get(RESOURCE, 0) >= 1}

    def _identify(self, workers: dict[str, Any]) -> list[ev.WorkerChanged]:
        """Ask each new worker who it is (and start its GPU worker): one task each, pinned to it."""
        new = [a for a in workers if a not in self._known]
        if not new:
            return []
        futs = {
            a: self.client.submit(
                self._worker_side.worker_identity,
                self.static_only,
                workers=[a],
                allow_other_workers=False,
                resources={RESOURCE: 1},
                pure=False,
                key=f"ptxbench-hello-{a}-{time.time()}",
            )
            for a in new
        }
        deadline = time.monotonic() + START_TIMEOUT_S
        started = []
        for a, f in futs.items():
            try:
                ident = f.result(timeout=max(0.1, deadline - time.monotonic()))
            except Exception as exc:  # no answer in time, or the worker died saying hello
                f.cancel()
                why = f"no answer ({type(exc).__name__}: {exc})"[:500]
                self._known[a] = {"name": workers[a].get("name") or a, "error": why, "lost": True}
                self.events.put(ev.WorkerChanged(str(self._known[a]["name"]), "retired", None, None, why))
                continue
            self._known[a] = ident
            if ident.get("error"):
                self.events.put(ev.WorkerChanged(str(ident["name"]), "retired", None, None, ident["error"]))
                continue
            started.append(a)
        return [
            ev.WorkerChanged(
                str(self._known[a]["name"]),
                "ready",
                self._known[a].get("device"),
                None if self.static_only else self._on_gpu(self._known[a].get("gpu")) > 1 or None,
            )
            for a in started
        ]

    def _poll(self) -> None:
        """Workers that came and went since the last look (the client's view, refreshed every few seconds)."""
        now = time.monotonic()
        if now - self._last_poll < 1.0 or self.client is None:
            return
        self._last_poll = now
        current = self._gpu_workers()
        for a, ident in self._known.items():
            if a not in current and not ident.get("lost"):
                ident["lost"] = True
                self.events.put(
                    ev.WorkerChanged(
                        str(ident.get("name", a)),
                        "lost",
                        ident.get("device"),
                        None,
                        "the worker went away; Dask runs its jobs again elsewhere",
                    )
                )
        for a, w in current.items():
            if a not in self._known:
                self._known[a] = {"name": w.get("name") or a, "gpu": None, "device": None, "lost": False}
                self.events.put(ev.WorkerChanged(str(w.get("name") or a), "joined", None, None, a))

    def _job_began(self, event: tuple[float, dict[str, Any]]) -> None:
        """A worker began a job (called on the client's event loop). A job run again elsewhere begins again."""
        _when, msg = event
        attempt = str(msg.get("attempt", ""))
        with self._lock:
            if any(req.attempt == attempt for req, _out in self._futures.values()):
                self._began[attempt] = time.monotonic()

    def _arrived(self, fut: Any) -> None:
        """A job's result, fetched off its worker at once (a result left on a worker is lost with it)."""
        with self._lock:
            entry = self._futures.pop(fut, None)
            if entry is not None:
                self._began.pop(entry[0].attempt, None)
        if entry is None:
            return  # withdrawn
        req, out = entry
        try:
            result = fut.result()
        except Exception as exc:  # the job failed as a task (a worker killed again and again: KilledWorker)
            result = JudgeOutcome(
                req.sample_id, req.attempt, "", error=f"{type(exc).__name__}: {exc}"[:2000], static=req.static
            )
        if isinstance(result, JudgeOutcome) and result.worker:
            self._say_notes(req, result)
        fut.release()
        if out.set_running_or_notify_cancel():
            out.set_result(result)

    def _say_notes(self, req: JudgeRequest, outcome: JudgeOutcome) -> None:
        worker = outcome.worker
        self.events.put(ev.SampleStarted(sample_id=req.sample_id, task_id=req.task_id, index=req.index, worker=worker))
        for stage, status, category in outcome.extra.pop("notes", []):
            self.events.put(
                ev.StageChanged(sample_id=req.sample_id, stage=stage, status=status, category=category, worker=worker)
            )
        fresh = outcome.extra.get("fresh_workers", 0)
        if fresh:
            self.events.put(
                ev.WorkerChanged(
                    worker, "restarted", outcome.device, None, f"{fresh} fresh worker(s) during sample {req.sample_id}"
                )
            )
        outcome.extra["workers_on_gpu"] = self._on_gpu(outcome.gpu_key)


def _visible_gpu_count() -> int:
    from ptxbench.services.gpuset import visible_gpus

    return len(visible_gpus())
