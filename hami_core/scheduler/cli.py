"""``hami scheduler`` (the extender, webhook and metrics service) and ``hami certs`` (a self-signed pair to
serve it over TLS locally): each command's ``add_arguments`` and ``run``, dispatched by :mod:`hami_core.cli`.

Importing this module is cheap and needs none of the ``scheduler`` extra's packages (the parser of every ``hami``
command is built up front); :func:`run` imports the service.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.cmdline import (
    add_cluster_source,
    cluster_from_args,
    count,
    positive_seconds,
    seconds,
    stop_on_signals,
    unavailable,
)
from hami_core.plugins.errors import HamiError

__all__ = ["add_arguments", "add_certs_arguments", "run", "run_certs"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami scheduler``."""
    from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT

    parser.description = (
        "Serve HAMi's scheduler extender (/filter, /bind), mutating webhook (/webhook), /healthz, "
        "/readyz and Prometheus metrics, against a Kubernetes cluster or an in-memory cluster file.")
    add_cluster_source(parser, cluster_file_help="serve an in-memory cluster of the Nodes and Pods in this YAML file "
                                                 "(no Kubernetes)")
    parser.add_argument("--http-bind", type=_bind(9443), default="127.0.0.1:9443", metavar="HOST:PORT",
                        help="extender address, and the webhook's without --webhook-bind (default: 127.0.0.1:9443)")
    parser.add_argument("--webhook-bind", type=_bind(9443), metavar="HOST:PORT",
                        help="serve /webhook, /healthz and /readyz on this address and only /filter and /bind on "
                             "--http-bind, e.g. --webhook-bind=0.0.0.0:9443 --http-bind=127.0.0.1:9444 to keep the "
                             "extender on loopback beside kube-scheduler (default: one listener for all, as HAMi)")
    parser.add_argument("--http-server", choices=("asyncio", "uvicorn"), default="asyncio",
                        help="HTTP server: asyncio (hand-written, httptools parser) or uvicorn; both enforce the same "
                             "limits and answer alike (default: asyncio)")
    parser.add_argument("--client-ca-file", metavar="FILE",
                        help="require a client certificate signed by this CA (PEM) for /filter and /bind "
                             "(kube-scheduler's extender tlsConfig certFile/keyFile); needs --tls-cert")
    parser.add_argument("--webhook-client-ca-file", metavar="FILE",
                        help="require a client certificate signed by this CA (PEM) for /webhook (kube-apiserver's "
                             "AdmissionConfiguration kubeConfigFile); needs --tls-cert; probes need none")
    parser.add_argument("--extender-token-file", metavar="FILE",
                        help="accept 'Authorization: Bearer TOKEN' for /filter and /bind with a token from this file "
                             "(one a line; re-read when it changes); with --client-ca-file either one suffices")
    parser.add_argument("--metrics-bind", type=_bind(9395, empty=True), default=":9395", metavar="HOST:PORT",
                        help="metrics address, empty to disable (default: :9395)")
    parser.add_argument("--metrics-device-detail", action="store_true",
                        help="export HAMi's per-device and per-pod series (hami_gpu_*, hami_node_gpu_*, hami_vgpu_*; "
                             "a series per GPU and per pod) instead of one per node and device type")
    parser.add_argument("--tls-cert", metavar="FILE", help="TLS certificate (PEM); with --tls-key serves HTTPS")
    parser.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    parser.add_argument("--scheduler-name", default="hami-scheduler",
                        help="scheduler name set by the webhook and used as event source (default: hami-scheduler)")
    parser.add_argument("--trusted-identities", type=_identity_names, metavar="USER,...",
                        help="user names (as kube-apiserver authenticates them) that may change the scheduler-owned "
                             "pod annotations (hami.io/vgpu-node, bind phase and time, every vendor's to-allocate and "
                             "allocated keys); the webhook denies anyone else's UPDATE that adds, changes or removes "
                             "one (default: system:serviceaccount:kube-system:hami-scheduler,"
                             "system:serviceaccount:kube-system:hami-device-plugin)")
    parser.add_argument("--trusted-groups", type=_identity_names, default=(), metavar="GROUP,...",
                        help="group names whose members may too (default: none; system:nodes, every kubelet, is not "
                             "trusted)")
    parser.add_argument("--node-scheduler-policy", choices=("binpack", "spread", "fgd"),
                        help="default node policy (default: the device config's, else binpack)")
    parser.add_argument("--gpu-scheduler-policy", metavar="POLICY",
                        help="default GPU policy, e.g. spread, binpack, topology-aware (default: the device "
                             "config's, else spread)")
    parser.add_argument("--device-config", metavar="PATH", help="device-config.yaml (default: built-in defaults)")
    parser.add_argument("--node-lock-timeout", type=seconds, metavar="SECONDS",
                        help="node lock expiry (default: the device config's scheduler.nodeLockTimeout, 300); a "
                             "lock whose pod is bound and still waits for its Allocate is kept past it")
    parser.add_argument("--node-lock-retry-timeout", type=seconds, default=28.0, metavar="SECONDS",
                        help="how long PodGroup members wait for a locked node (default: 28)")
    parser.add_argument("--node-lock-wait", type=seconds, default=10.0, metavar="SECONDS",
                        help="how long a bind of any other pod waits, queued in arrival order, for a node another "
                             "pod has locked until its device plugin's Allocate (default: 10; 0 fails the bind at "
                             "once, as HAMi does, and kube-scheduler retries it after its backoff)")
    parser.add_argument("--write-allocation", choices=("filter", "bind"), default="filter",
                        help="filter: /filter patches the pod with its device allocation before answering, as HAMi "
                             "does; bind: /filter answers once the devices are booked, with no API call, and /bind "
                             "writes the allocation with the bind phase in one patch under the node lock "
                             "(default: filter)")
    parser.add_argument("--node-inflight-limit", type=count, default=DEFAULT_INFLIGHT_LIMIT, metavar="N",
                        help="a node with N pods between filter and its device plugin's Allocate (HAMi's node lock "
                             "lets one at a time through) is chosen only when no other node fits, so that a burst "
                             "fills several nodes side by side instead of queueing on one, at some cost in packing "
                             f"(default: {DEFAULT_INFLIGHT_LIMIT}: off, placing as HAMi does)")
    parser.add_argument("--requeue-nudge", type=seconds, default=1.0, metavar="SECONDS",
                        help="when a pod that held devices goes away while pods this scheduler refused are pending, "
                             "write hami.io/devices-released-at on its node so that kube-scheduler retries them "
                             "(kube-scheduler requeues extender-refused pods on any cluster event, and may have "
                             "retried them before hami saw the release); at most one write per SECONDS "
                             "(default: 1; 0: never, the pods then wait for the next cluster event or "
                             "kube-scheduler's 5-minute flush)")
    parser.add_argument("--preemption", action=argparse.BooleanOptionalAction, default=True,
                        help="device-aware preemption: when no node fits a pod, evict the fewest lower-priority pods "
                             "whose devices it needs and hold the room for it; and the extender's preempt verb "
                             "(preemptVerb: preempt; docs/scheduler.md, Preemption). --no-preemption: neither")
    parser.add_argument("--filter-reasons", action=argparse.BooleanOptionalAction, default=True,
                        help="when a filter finds no node for a pod, write the per-node reasons on the pod "
                             "(annotation hami.io/filter-reasons, bounded, written only when they change, removed "
                             "when the pod binds; hami explain shows it) (default: on)")
    parser.add_argument("--normal-events", action=argparse.BooleanOptionalAction, default=True,
                        help="post HAMi's Normal events FilteringSucceed and BindingSucceed for every pod, two API "
                             "writes a pod (default: on, as HAMi; Warning events are always posted)")
    parser.add_argument("--resync", type=positive_seconds, default=15.0, metavar="SECONDS",
                        help="period of the node re-registration pass (default: 15)")
    parser.add_argument("--leader-elect", action="store_true",
                        help="register nodes only while holding the scheduler lease (Kubernetes only)")
    parser.add_argument("--leader-elect-resource-name", default="hami-scheduler", metavar="NAME",
                        help="lease name (default: hami-scheduler)")
    parser.add_argument("--leader-elect-resource-namespace", default="kube-system", metavar="NAMESPACE",
                        help="lease namespace (default: kube-system)")
    parser.add_argument("--device-mode", choices=("device-plugin", "dra"), default="device-plugin",
                        help="device-plugin (default): hami's extender books devices, and pods of Namespaces "
                             "labelled hami.io/device-mode=dra are translated to DRA ResourceClaims; dra: every "
                             "pod's HAMi requests are translated (kube-scheduler's DRA allocator places them)")
    parser.add_argument("--kube-qps", type=float, default=5.0, help="API client QPS (default: 5)")
    parser.add_argument("--kube-burst", type=int, default=10, help="API client burst (default: 10)")


def _bind(default_port: int, *, empty: bool = False) -> Callable[[str], str]:
    """An argparse type checking ``HOST:PORT`` with :func:`~hami_core.scheduler.server.parse_bind` (``empty``:
    "" is allowed and means disabled); the text itself is kept for messages."""

    def check(text: str) -> str:
        if empty and text == "":
            return text
        try:
            from hami_core.scheduler.server import parse_bind
        except ImportError:  # without the scheduler extra: run() says what is missing
            return text
        try:
            parse_bind(text, default_port)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


def _identity_names(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of Kubernetes user or group names."""
    from hami_core.scheduler.identity import parse_names

    try:
        return parse_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then shut down gracefully."""
    from hami_core.engine.config import load_config
    from hami_core.engine.facade import Engine

    try:
        from hami_core.scheduler.app import Options, Scheduler
        from hami_core.scheduler.server import parse_bind
    except ImportError as exc:
        raise unavailable("scheduler", "scheduler", exc) from None

    if bool(args.tls_cert) != bool(args.tls_key):
        raise HamiError("--tls-cert and --tls-key go together")
    for flag, value in (("--client-ca-file", args.client_ca_file),
                        ("--webhook-client-ca-file", args.webhook_client_ca_file)):
        if value and not args.tls_cert:
            raise HamiError(f"{flag} needs TLS: give --tls-cert and --tls-key too")
    try:
        host, port = parse_bind(args.http_bind, 9443)
        webhook = parse_bind(args.webhook_bind, 9443) if args.webhook_bind else None
        metrics = parse_bind(args.metrics_bind, 9395) if args.metrics_bind else None
    except ValueError as exc:
        raise HamiError(str(exc)) from None
    if webhook is not None and webhook[1] == port and port != 0:
        raise HamiError(f"--webhook-bind {args.webhook_bind} and --http-bind {args.http_bind} need different ports")
    config = load_config(args.device_config)
    overrides = {k: v for k, v in (("node_scheduler_policy", args.node_scheduler_policy),
                                   ("gpu_scheduler_policy", args.gpu_scheduler_policy),
                                   ("scheduler_name", args.scheduler_name)) if v}
    if overrides:
        config = _with_scheduler(config, overrides)
    engine = Engine(config)
    cluster = cluster_from_args(args, qps=args.kube_qps, burst=args.kube_burst)
    elector, elector_stop = _leader(args, cluster)
    options = Options(host=host, port=port, metrics_host=metrics[0] if metrics else None,
                      metrics_port=metrics[1] if metrics else 0, cert_file=args.tls_cert, key_file=args.tls_key,
                      scheduler_name=args.scheduler_name,
                      lock_timeout_s=args.node_lock_timeout or config.scheduler.node_lock_timeout,
                      lock_retry_timeout_s=args.node_lock_retry_timeout, lock_wait_s=args.node_lock_wait,
                      write_allocation=args.write_allocation, resync_s=args.resync,
                      inflight_limit=args.node_inflight_limit, normal_events=args.normal_events,
                      requeue_nudge_s=args.requeue_nudge, filter_reasons=args.filter_reasons,
                      preemption=args.preemption,
                      http_server=args.http_server, webhook_host=webhook[0] if webhook else None,
                      webhook_port=webhook[1] if webhook else 0, client_ca_file=args.client_ca_file,
                      extender_token_file=args.extender_token_file, metrics_device_detail=args.metrics_device_detail,
                      webhook_client_ca_file=args.webhook_client_ca_file,
                      trusted_users=args.trusted_identities,
                      trusted_groups=args.trusted_groups, device_mode=args.device_mode)
    try:
        service = Scheduler(engine, cluster, options, is_leader=elector.is_leader if elector else None)
    except OSError as exc:
        where = " or ".join(a for a in (args.http_bind, args.webhook_bind) if a)
        raise HamiError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise HamiError(str(exc)) from None
    stop = stop_on_signals()
    try:
        service.start()
    except OSError as exc:
        for server in service.servers:
            server.shutdown()
        raise HamiError(f"cannot start: {exc.strerror or exc}") from None
    # INFO: the server commands log at INFO unless told otherwise (hami_core.cli.SERVER_LOG_LEVEL), so the default
    # still shows where the service listens and who may call it, without a warning for a healthy start.
    log = logging.getLogger("hami.scheduler")
    if service.webhook_server is None:
        listeners = f"{service.server.url}/filter, /bind, /webhook, /healthz, /readyz"
    else:
        listeners = f"{service.server.url}/filter, /bind; {service.webhook_server.url}/webhook, /healthz, /readyz"
    extender_callers = " or ".join(w for w, on in (
        (f"client certificates of {args.client_ca_file}", args.client_ca_file),
        (f"the bearer tokens of {args.extender_token_file}", args.extender_token_file)) if on)
    callers = (f"extender: {extender_callers or 'anyone'}; webhook: "
               + (f"client certificates of {args.webhook_client_ca_file}" if args.webhook_client_ca_file else "anyone"))
    log.info("hami scheduler %s serving %s (%s server); callers: %s; metrics %s; %d node(s)",
                args.scheduler_name, listeners, args.http_server, callers, service.metrics_url or "disabled",
                len(engine.nodes))
    if not extender_callers and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("the extender on %s accepts any caller: anyone reaching the port can bind pods; give "
                    "--client-ca-file or --extender-token-file, or serve it on loopback (--webhook-bind)",
                    args.http_bind)
    stop.wait()
    logging.getLogger("hami.scheduler").info("shutting down")
    service.stop()
    if elector_stop is not None:
        elector_stop.set()
    return 0


def _leader(args: argparse.Namespace, cluster: Any) -> tuple[Any, Any]:
    """(elector, stop event) following the kube-scheduler's Lease, or (None, None) without --leader-elect."""
    if not args.leader_elect:
        return None, None
    if args.cluster_file:
        raise HamiError("--leader-elect needs a Kubernetes cluster, not --cluster-file")
    try:
        leader = importlib.import_module("hami_core.cluster.leader")
    except ImportError as exc:
        raise HamiError(f"leader election is unavailable ({exc})") from None
    import socket
    import threading

    # HAMi does not campaign: it follows the co-located kube-scheduler's Lease (holder = <hostname>_<uuid>).
    elector = leader.LeaderElector(cluster.api_client, namespace=args.leader_elect_resource_namespace,
                                   name=args.leader_elect_resource_name, identity=socket.gethostname(),
                                   campaign=False)
    stop = threading.Event()
    threading.Thread(target=elector.run, args=(stop,), name="hami-leader", daemon=True).start()
    return elector, stop


def _with_scheduler(config: Any, overrides: Mapping[str, str]) -> Any:
    """``config`` with scheduler settings replaced (flags win over the device config file)."""
    from dataclasses import replace

    from pydantic import ValidationError

    sched = config.scheduler
    try:
        updated = type(sched).model_validate({**sched.model_dump(), **overrides})
    except ValidationError as exc:
        raise HamiError(f"invalid scheduler flag: {exc.errors()[0].get('msg', exc)}") from None
    return replace(config, scheduler=updated)


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami certs``."""
    parser.description = ("Write tls.crt (mode 0644) and tls.key (mode 0600, created afresh, "
                           "never through a symbolic link) self-signed, for serving the "
                           "scheduler over TLS locally.")
    parser.add_argument("--out", metavar="DIR", required=True, help="directory to write tls.crt and tls.key to")
    parser.add_argument("--host", metavar="NAME", action="append", dest="hosts",
                        help="DNS name or IP the certificate is valid for (repeatable; default localhost, 127.0.0.1)")
    parser.add_argument("--days", type=int, default=365, help="validity in days (default: 365)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing tls.crt/tls.key (removed, then created afresh; a symbolic link "
                             "there is refused either way)")


def run_certs(args: argparse.Namespace) -> int:
    """Write the pair; print where."""
    try:
        from hami_core.scheduler.certs import DEFAULT_HOSTS, write_self_signed
    except ImportError as exc:
        raise unavailable("certs", "scheduler", exc) from None

    try:
        cert, key = write_self_signed(args.out, args.hosts or DEFAULT_HOSTS, days=args.days, force=args.force)
    except OSError as exc:
        raise HamiError(f"cannot write certificates to {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {cert} and {key}")
    return 0
