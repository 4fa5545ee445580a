"""DRA mode: hami-py as a Dynamic Resource Allocation driver (resource.k8s.io/v1), from the same vendor plugins.

A node in DRA mode publishes its devices as ResourceSlices (:mod:`.slices`), kube-scheduler's own DRA allocator
places claims on them (no extender), and the kubelet DRA plugin (:mod:`.kubelet`) prepares each allocated share as
a CDI spec carrying HAMi-core's limits. :mod:`.model` is the vocabulary every part shares. See docs/dra.md.
"""
