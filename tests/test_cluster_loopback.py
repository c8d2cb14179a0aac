"""`--cluster local` listens on this machine only: the scheduler, the workers, their nannies and the
HTTP servers Dask starts are bound to 127.0.0.1, and no dashboard is served."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from ptxbench.services.cluster import LOCAL_HOST, DaskBackend, local_cluster_options
from ptxbench.services.dispatch import BackendUnavailable

pytestmark = pytest.mark.timeout(120)


def test_the_local_cluster_is_asked_for_loopback_and_no_dashboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """What DaskBackend hands LocalCluster, seen without starting one."""
    import distributed

    seen: dict[str, object] = {}

    def fake_cluster(**kwargs: object) -> object:
        seen.update(kwargs)
        raise OSError("not started in this test")

    monkeypatch.setattr(distributed, "LocalCluster", fake_cluster)
    with pytest.raises(BackendUnavailable):
        DaskBackend("local:2").start(set(), static_only=True)
    assert seen == local_cluster_options(2)
    assert seen["host"] == LOCAL_HOST == "127.0.0.1"
    assert seen["dashboard_address"] is None and seen["worker_dashboard_address"] is None
    assert seen["scheduler_kwargs"] == {"dashboard": False, "dashboard_address": "127.0.0.1:0"}


def _worker_listeners(dask_worker) -> list[str]:  # runs on the worker
    from distributed.comm.utils import get_tcp_server_addresses

    return [dask_worker.address] + [host for host, _port in get_tcp_server_addresses(dask_worker.http_server)]


def test_a_real_local_cluster_listens_on_loopback_only() -> None:
    from distributed import Client, LocalCluster
    from distributed.comm.addressing import get_address_host
    from distributed.comm.utils import get_tcp_server_addresses

    with LocalCluster(**local_cluster_options(1)) as cluster, Client(cluster, set_as_default=False) as client:
        scheduler = cluster.scheduler
        hosts = [get_address_host(scheduler.address)]
        hosts += [host for host, _port in get_tcp_server_addresses(scheduler.http_server)]
        workers = client.scheduler_info(n_workers=-1)["workers"]
        assert len(workers) == 1
        for address, info in workers.items():
            hosts += [get_address_host(address), get_address_host(info["nanny"])]
        for listeners in client.run(_worker_listeners).values():
            hosts += [get_address_host(a) if "://" in a else a for a in listeners]
        # The scheduler's HTTP server is the one `dashboard_address=":0"` put on 0.0.0.0.
        assert hosts and set(hosts) == {"127.0.0.1"}, hosts
