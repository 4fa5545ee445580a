"""The kubelet side of DRA mode: the ``DRAPlugin`` gRPC service kubelet calls to prepare a pod's ResourceClaims,
and the plugin-registration service that tells kubelet where it is. See :mod:`hami_core.dra.kubelet.plugin`."""
