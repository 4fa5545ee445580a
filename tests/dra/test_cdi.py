"""CDI specs and the prepared-claims checkpoint, on their own."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hami_core.dra import cdi
from hami_core.dra.checkpoint import Checkpoint, CheckpointError, PreparedClaim, PreparedDevice
from hami_core.plugins.types import ContainerAllocation, DeviceSpec, Mount

DRIVER = "hami-core-gpu.project-hami.io"
UID = "3f2a9c1e-1111-4222-8333-944455556666"


def test_container_edits_from_an_allocation() -> None:
    alloc = ContainerAllocation(env={"B": "2", "A": "x=y"},
                                mounts=(Mount("/etc/ld.so.preload", "/h/ld.so.preload", True),
                                        Mount("/c", "/h/c", False)),
                                devices=(DeviceSpec("/dev/dri/card0", "/dev/dri/card0", "rw"),))
    assert cdi.container_edits(alloc) == {
        "env": ["A=x=y", "B=2"],
        "mounts": [{"hostPath": "/h/ld.so.preload", "containerPath": "/etc/ld.so.preload",
                    "options": ["ro", "nosuid", "nodev", "rbind"]},
                   {"hostPath": "/h/c", "containerPath": "/c", "options": ["rw", "nosuid", "nodev", "rbind"]}],
        "deviceNodes": [{"path": "/dev/dri/card0", "hostPath": "/dev/dri/card0", "permissions": "rw"}]}
    assert cdi.container_edits(ContainerAllocation(env={"A": "1"})) == {"env": ["A=1"]}


def test_names_follow_cdi_rules() -> None:
    assert cdi.cdi_kind(DRIVER) == f"{DRIVER}/claim"
    assert cdi.device_id(DRIVER, f"{UID}-gpu-0") == f"{DRIVER}/claim={UID}-gpu-0"
    for bad in ("a/b", "-x", "a b", ""):
        with pytest.raises(ValueError, match="CDI device name"):
            cdi.device_id(DRIVER, bad)
    with pytest.raises(ValueError, match="vendor"):
        cdi.cdi_kind("bad/driver")
    with pytest.raises(ValueError, match="claim uid"):
        cdi.spec_path("/run/cdi", DRIVER, "../../etc/x")


def test_write_and_remove_a_spec(tmp_path: Path) -> None:
    devices = [cdi.CdiDevice(f"{UID}-gpu-0", {"env": ["A=1"]})]
    path = cdi.write_spec(tmp_path / "cdi", DRIVER, UID, devices)
    assert path == tmp_path / "cdi" / f"{DRIVER}-{UID}.json"
    assert json.loads(path.read_text()) == {"cdiVersion": "0.6.0", "kind": f"{DRIVER}/claim", "devices": [
        {"name": f"{UID}-gpu-0", "containerEdits": {"env": ["A=1"]}}]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert cdi.remove_spec(tmp_path / "cdi", DRIVER, UID) is True
    assert cdi.remove_spec(tmp_path / "cdi", DRIVER, UID) is False
    with pytest.raises(ValueError, match="at least one device"):
        cdi.write_spec(tmp_path / "cdi", DRIVER, UID, [])


def prepared(uid: str = UID) -> PreparedClaim:
    return PreparedClaim(namespace="ml", name="c", uid=uid, spec_path=f"/run/cdi/{uid}.json", devices=(
        PreparedDevice(("gpu",), "node-a", "gpu-0", (f"{DRIVER}/claim={uid}-gpu-0",), "s-1"),))


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.put(prepared())
    cp.put(prepared("other-uid"))
    assert stat.S_IMODE(cp.path.stat().st_mode) == 0o600
    again = Checkpoint(tmp_path)
    assert again.claims() == {UID: prepared(), "other-uid": prepared("other-uid")}
    assert again.remove(UID) == prepared()
    assert again.remove(UID) is None
    assert Checkpoint(tmp_path).claims() == {"other-uid": prepared("other-uid")}
    assert json.loads(cp.path.read_text())["version"] == 1


@pytest.mark.parametrize(("change", "message"), [
    (lambda doc: doc["entries"][UID].update(name="evil"), "checksum"),
    (lambda doc: doc.update(version=2), "version 2"),
    (lambda doc: doc["entries"][UID].pop("spec_path"), "checksum"),
])
def test_a_tampered_checkpoint_is_refused(tmp_path: Path, change, message: str) -> None:
    cp = Checkpoint(tmp_path)
    cp.put(prepared())
    doc = json.loads(cp.path.read_text())
    change(doc)
    cp.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=message):
        Checkpoint(tmp_path)


def test_a_torn_checkpoint_is_refused(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.put(prepared())
    cp.path.write_bytes(cp.path.read_bytes()[:40])
    with pytest.raises(CheckpointError, match="not JSON"):
        Checkpoint(tmp_path)
