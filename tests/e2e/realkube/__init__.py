"""The real-control-plane harness of the e2e tier (``make e2e``) and of ``make bench-e2e``: etcd, kube-apiserver and
kube-scheduler built by ``make e2e-bin``, hami's own components as processes, and the kubelet parts the harness plays.
"""
