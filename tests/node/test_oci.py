"""CDI and OCI runtime-spec output validated against the schemas in ../shared/schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_core.node.oci import apply_to_oci, cdi_device_name, to_cdi_spec
from hami_core.plugins.types import ContainerAllocation, DeviceSpec, Mount

SCHEMAS = Path(__file__).resolve().parents[2].parent / "shared" / "schemas"

ALLOC = ContainerAllocation(
    env={"NVIDIA_VISIBLE_DEVICES": "GPU-a", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m"},
    mounts=(Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
            Mount("/tmp/vgpulock", "/tmp/vgpulock", False)),
    devices=(DeviceSpec("/dev/null", "/dev/null", "rw"),),
    annotations={"hami.io/example": "1"})


def _validator(folder: str, schema: str):
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    base = SCHEMAS / folder
    if not base.is_dir():
        pytest.skip(f"schemas not found at {base} (../shared is absent)")
    resources = []
    for path in base.glob("*.json"):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resource = referencing.Resource.from_contents(contents, default_specification=referencing.jsonschema.DRAFT4)
        resources.append((path.name, resource))
        resources.append((path.resolve().as_uri(), resource))
    registry = referencing.Registry().with_resources(resources)
    main = json.loads((base / schema).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(main, default=jsonschema.Draft4Validator)
    return cls(main, registry=registry)


def test_cdi_spec_is_valid() -> None:
    spec = to_cdi_spec(ALLOC, kind="hami.io/gpu", device_name="pod-uid_ctr")
    _validator("cdi", "schema.json").validate(spec)
    assert spec["devices"][0]["containerEdits"]["env"] == ["CUDA_DEVICE_MEMORY_LIMIT_0=3000m",
                                                         "NVIDIA_VISIBLE_DEVICES=GPU-a"]
    assert cdi_device_name("hami.io/gpu", "x") == "hami.io/gpu=x"


def test_oci_edits_are_valid() -> None:
    base = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]},
            "linux": {}}
    out = apply_to_oci(base, ALLOC)
    _validator("oci-runtime-spec", "config-schema.json").validate(out)
    assert out["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_DEVICE_MEMORY_LIMIT_0=3000m"]
    assert out["mounts"][1] == {"destination": "/tmp/vgpulock", "type": "bind", "source": "/tmp/vgpulock",
                                "options": ["rbind", "rw", "nosuid", "nodev"]}
    assert out["linux"]["devices"] == [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}]
    assert out["annotations"] == {"hami.io/example": "1"}
    assert base["process"]["env"][1] == "NVIDIA_VISIBLE_DEVICES=void"  # input untouched


def test_oci_rejects_a_non_device() -> None:
    with pytest.raises(ValueError, match="not a device node"):
        apply_to_oci({}, ContainerAllocation(devices=(DeviceSpec("/dev/x", "/etc/hostname"),)))
