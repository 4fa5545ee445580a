"""The HTTP side of ``hami monitor``: ``/metrics`` from a prometheus-client registry on its own port.

prometheus-client's generic ``generate_latest`` validates and escapes every label *name* of every sample, which
costs about 10 µs a sample: 35 ms of a 3 200-sample node. Our collector's label names are fixed identifiers, so
the plain-text format (0.0.4) is rendered here with only label *values* escaped; the output is the same text.
Scrapes that ask for OpenMetrics, and paths other than ``/metrics``, go to prometheus-client's own WSGI app.
The server bounds every client (:mod:`hami_core.monitor.httpserver`).
"""

from __future__ import annotations

import gzip
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from hami_core.monitor.httpserver import make_bounded_server

__all__ = ["render_text", "serve"]

log = logging.getLogger("hami.monitor")


def _value(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _escape(s: str) -> str:
    if "\\" in s or "\n" in s or '"' in s:
        return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return s


def render_text(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format (0.0.4) of ``registry``; gauges, counters and untyped samples.

    A sample whose labels are not valid text (a lone surrogate: bytes that were not UTF-8 where it came from)
    is left out with a log line, so that one bad value costs its own sample and not the whole scrape.
    """
    out: list[str] = []
    for family in registry.collect():
        doc = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        kind = family.type if family.type in ("gauge", "counter", "histogram", "summary") else "untyped"
        name = family.name + ("_total" if kind == "counter" and not family.name.endswith("_total") else "")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for s in family.samples:
            labels = s.labels
            if labels:
                body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                out.append(f"{s.name}{{{body}}} {_value(s.value)}\n")
            else:
                out.append(f"{s.name} {_value(s.value)}\n")
    text = "".join(out)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _encodable(out)


def _encodable(lines: list[str]) -> bytes:
    kept, dropped = [], 0
    for line in lines:
        try:
            kept.append(line.encode())
        except UnicodeEncodeError:
            dropped += 1
    log.warning("left %d sample(s) out of the scrape: their labels are not valid UTF-8", dropped)
    return b"".join(kept)


def _app(registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    fallback = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        accept = environ.get("HTTP_ACCEPT", "")
        if environ.get("PATH_INFO", "/") not in ("/metrics", "/") or "application/openmetrics-text" in accept \
                or environ.get("REQUEST_METHOD") != "GET":
            return fallback(environ, start_response)
        body = render_text(registry)
        headers = [("Content-Type", CONTENT_TYPE_LATEST)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [body]

    return app


def serve(registry: CollectorRegistry, host: str, port: int, **limits: Any) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` on ``host:port`` (0 = any) in a daemon thread, with the bounds of
    :mod:`hami_core.monitor.httpserver` (``limits`` override them); returns (server, thread)."""
    server = make_bounded_server(host, port, _app(registry), **limits)
    thread = threading.Thread(target=server.serve_forever, name="hami-monitor-http", daemon=True)
    thread.start()
    return server, thread
