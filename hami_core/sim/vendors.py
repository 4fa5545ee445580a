"""The device-config sections ``hami simulate --cluster FILE`` runs with when ``--config`` does not name them.

A vendor plugin builds backends only for a section present in the configuration, and an empty section is the
vendor's chart defaults. Without this, a cluster file of Ascend nodes ran with the NVIDIA-only default: the
Ascend registrations were never read and every pod was "no managed device requested", placed as a CPU pod.
Here each installed plugin is asked, section by section, which backends its default section builds; the
sections whose backends find devices on the nodes (or are requested by the pods) are switched on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hami_core.engine.config import DEFAULT_DEVICE_CONFIG, HAMI_SECTIONS, EngineConfig
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import HamiError


def default_sections(plugins: Any) -> dict[str, frozenset[str]]:
    """Section name → the backends its default (empty) body builds, for every installed plugin.

    Candidates are HAMi's sections and the names of the plugins implementing ``hami_device_backends`` (a
    third-party vendor's section is conventionally its plugin name, as ``acme`` in examples/).
    """
    candidates = set(HAMI_SECTIONS)
    candidates.update(impl.plugin_name for impl in plugins.hook.hami_device_backends.get_hookimpls())
    out: dict[str, frozenset[str]] = {}
    for section in sorted(candidates):
        try:
            names = frozenset(b.name for b in plugins.backends({section: {}}))
        except HamiError:  # a plugin whose section cannot be empty has no default to offer
            continue
        if names:
            out[section] = names
    return out


def detect_sections(plugins: Any, scheduler: Any, nodes: Sequence[Mapping[str, Any]],
                    pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The default sections whose backends register devices on ``nodes`` or are requested by ``pods``."""
    sections = default_sections(plugins)
    if not sections:
        return []
    probe = Engine(EngineConfig(devices={s: {} for s in sections}, scheduler=scheduler,
                                source="<simulate: every installed vendor>"), plugins=plugins)
    used: set[str] = set()
    for node in nodes:
        try:
            status = probe.upsert_node(node)
        except HamiError:  # the real run reports a bad node; here it just shows no vendor
            continue
        used.update(b for b, devs in probe.nodes[status.name].devices.items() if devs)
    for pod in pods:
        try:
            used.update(probe.requests(pod).backends())
        except HamiError:
            continue
    return sorted(s for s, names in sections.items() if names & used)


def with_vendor_defaults(config: EngineConfig, plugins: Any, nodes: Sequence[Mapping[str, Any]],
                         pods: Sequence[Mapping[str, Any]]) -> EngineConfig:
    """``config`` with the default section of every vendor found on ``nodes``/``pods`` added.

    A section ``config`` already has (from ``--config``) wins over the default. With no vendor found the
    configuration keeps HAMi's NVIDIA default.
    """
    found = detect_sections(plugins, config.scheduler, nodes, pods)
    if not found:
        return config
    devices: dict[str, Any] = {s: {} for s in found}
    explicit = dict(config.devices)
    if config.source == "<default>" and explicit == DEFAULT_DEVICE_CONFIG:
        explicit = {}  # no --config: NVIDIA was only the fallback, not a choice
    devices.update(explicit)
    return replace(config, devices=devices)
