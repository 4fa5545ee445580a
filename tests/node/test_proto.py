"""The checked-in stubs match the proto, and the proto matches kubelet's wire contract (spec node.md §1.2-§1.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_core.node import regen
from hami_core.node.deviceplugin.v1beta1 import api_pb2 as pb


def test_regenerating_gives_identical_files(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    generated = regen.generate(tmp_path)
    target = regen.repo_root() / Path(regen.PROTO).parent
    for name, text in generated.items():
        assert (target / name).read_text(encoding="utf-8") == text, f"{name} is stale: python -m hami_core.node.regen"


@pytest.mark.parametrize(("message", "fields"), [
    ("DevicePluginOptions", {"pre_start_required": 1, "get_preferred_allocation_available": 2}),
    ("RegisterRequest", {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
    ("Device", {"ID": 1, "health": 2, "topology": 3}),
    ("NUMANode", {"ID": 1}),
    ("ContainerPreferredAllocationRequest",
     {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}),
    ("ContainerAllocateResponse", {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}),
    ("Mount", {"container_path": 1, "host_path": 2, "read_only": 3}),
    ("DeviceSpec", {"container_path": 1, "host_path": 2, "permissions": 3}),
    ("PreStartContainerRequest", {"devices_ids": 1}),
])
def test_field_numbers(message: str, fields: dict[str, int]) -> None:
    desc = pb.DESCRIPTOR.message_types_by_name[message]
    assert {f.name: f.number for f in desc.fields} == fields


def test_method_paths() -> None:
    dp = pb.DESCRIPTOR.services_by_name["DevicePlugin"]
    assert dp.full_name == "v1beta1.DevicePlugin"
    assert [m.name for m in dp.methods] == ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation",
                                            "Allocate", "PreStartContainer"]
    assert dp.methods_by_name["ListAndWatch"].server_streaming
    assert pb.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"


def test_the_stubs_ask_for_the_grpcio_the_project_declares() -> None:
    """The generated stubs' grpcio check names pyproject's floor for grpcio, whichever grpcio-tools generated them:
    a newer grpcio-tools regenerates identical files, and the stubs import on the oldest grpcio the project allows."""
    import re
    import tomllib

    from hami_core.protogen import GRPC_FLOOR

    project = tomllib.loads((regen.repo_root() / "pyproject.toml").read_text(encoding="utf-8"))
    deps = [d for group in project["project"]["optional-dependencies"].values() for d in group]
    floors = {m[1] for d in deps if (m := re.fullmatch(r"grpcio>=([0-9.]+)", d.replace(" ", "")))}
    assert floors == {GRPC_FLOOR}
    stub = (regen.repo_root() / Path(regen.PROTO).parent / "api_pb2_grpc.py").read_text(encoding="utf-8")
    assert f"GRPC_GENERATED_VERSION = '{GRPC_FLOOR}'" in stub
