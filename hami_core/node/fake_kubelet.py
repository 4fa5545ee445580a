"""Moved to :mod:`hami_core.testing.fake_kubelet` (the test kit); this alias goes in hami-core 0.3.

Kept only while ``plugins/hami-nvidia/tests`` still import it from here (tests/test_layers.py lists this module
as an allowed exception to the layering: ``node`` must not import the test kit).
"""

from __future__ import annotations

from hami_core.testing.fake_kubelet import FakeKubelet, PluginClient, running_kubelet

__all__ = ["FakeKubelet", "PluginClient", "running_kubelet"]
