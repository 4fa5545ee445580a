"""The node side: a kubelet device plugin for any vendor (spec node.md §1-§2).

* :mod:`hami_core.node.allocate` (no gRPC): find the one pod an Allocate can be for (the node lock, the node's
  waiting pods, kubelet's device IDs against its booking; refuse rather than guess), consume its
  devices-to-allocate entries, ask the vendor's ``hami_allocate`` hook, mark success or failure.
* :mod:`hami_core.node.register`: the node registration annotation writer.
* :mod:`hami_core.node.server`: the gRPC ``v1beta1.DevicePlugin`` server, kubelet registration and
  kubelet-restart detection. gRPC is imported only here (and in the generated stubs).
* :mod:`hami_core.node.app`: wiring used by ``hami device-plugin``.

The stubs in ``deviceplugin/v1beta1`` are generated; see :mod:`hami_core.node.regen`.
"""
