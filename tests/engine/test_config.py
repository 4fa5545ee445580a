"""Configuration: device-config.yaml shape, the scheduler section, errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_core.engine.config import DEFAULT_DEVICE_CONFIG, load_config
from hami_core.plugins.errors import ConfigError


def test_defaults() -> None:
    cfg = load_config(None)
    assert cfg.devices == DEFAULT_DEVICE_CONFIG
    assert (cfg.scheduler.node_scheduler_policy, cfg.scheduler.gpu_scheduler_policy) == ("binpack", "spread")
    assert cfg.scheduler.scheduler_name == "hami-scheduler"


def test_yaml_file_and_empty_section(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\nscheduler:\n  gpuSchedulerPolicy: binpack,numa\n")
    cfg = load_config(path)
    assert cfg.devices == {"nvidia": {}}
    assert cfg.scheduler.gpu_scheduler_policy == "binpack,numa"
    assert cfg.source == str(path)


@pytest.mark.parametrize(("config", "needle"), [
    ({"scheduler": {"gpuSchedulerPolicy": "fastest"}}, "scheduler.gpuSchedulerPolicy"),
    ({"scheduler": {"nodeSchedulerPolcy": "spread"}}, "scheduler.nodeSchedulerPolcy"),
    ({"scheduler": {"nodeLockTimeout": -1}}, "scheduler.nodeLockTimeout"),
    ({"scheduler": "binpack"}, "scheduler: must be a mapping"),
    (["nvidia"], "must be a mapping of sections"),
])
def test_bad_config_names_the_field(config: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(config)  # type: ignore[arg-type]


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_vendor_section_errors_name_the_vendor_field(make_engine) -> None:
    from hami_nvidia import plugin as nvidia_plugin

    with pytest.raises(ConfigError, match=r"nvidia\.defaultCores"):
        make_engine({"nvidia": {"defaultCores": 500}}, nvidia_plugin)


def test_plugins_section_blocks_by_name_and_is_not_a_vendor_section() -> None:
    config = load_config({"nvidia": {}, "plugins": {"blocked": ["hami-metax", " kunlun "]}})
    assert config.blocked_plugins == ("hami-metax", "kunlun")
    assert "plugins" not in config.devices


@pytest.mark.parametrize(("section", "needle"), [
    ([], "plugins: must be a mapping"),
    ({"block": ["x"]}, "plugins.block: unknown field"),
    ({"blocked": "hami-metax"}, "plugins.blocked: must be a list"),
    ({"blocked": ["ok", ""]}, r"plugins.blocked\[1\]: must be a plugin or distribution name"),
    ({"blocked": [7]}, r"plugins.blocked\[0\]"),
    ({"blocked": ["x"] * 65}, "at most 64 names"),
])
def test_bad_plugins_section_names_the_field(section: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config({"nvidia": {}, "plugins": section})
