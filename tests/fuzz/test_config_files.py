"""Fuzz device-config.yaml through :func:`load_config` and the vendor plugins that validate their sections:
random bytes, random YAML and well-formed YAML with random values give a configuration or a
:class:`ConfigError` whose message names the file or the field, never another exception."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
import yaml
from fuzz_helpers import all_vendor_engine, json_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.engine.config import EngineConfig, load_config
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import ConfigError

_SETTINGS = settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
PLUGINS = all_vendor_engine().plugins
SECTIONS = ["nvidia", "cambricon", "hygon", "iluvatars", "vnpus", "metax", "mthreads", "kunlun", "enflame",
            "scheduler"]
#: Field names the sections really have, so that random values reach the field validators.
FIELDS = ["resourceCountName", "resourceMemoryName", "resourceCoreName", "resourceMemoryPercentageName",
          "resourcePriorityName", "defaultMemory", "defaultCores", "defaultGPUNum", "deviceSplitCount",
          "deviceMemoryScaling", "deviceCoreScaling", "knownMigGeometries", "gpuSchedulerPolicy",
          "nodeSchedulerPolicy", "schedulerName", "nodeLockTimeout", "forceOverwriteDefaultScheduler", "nodeconfig",
          "chipName", "commonWord", "resourceName", "resourceMemoryName", "memoryAllocatable", "memoryCapacity",
          "aiCore", "aiCPU", "templates", "name", "memory", "models", "nodeSelector", "operatingmode"]

_section = st.none() | json_values | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), json_values,
                                                      max_size=5)
_config = st.dictionaries(st.sampled_from(SECTIONS) | st.text(max_size=6) | st.integers(), _section, max_size=4)


def _yaml_text(value: Any) -> str:
    try:
        return yaml.safe_dump(value, allow_unicode=True)
    except yaml.YAMLError:
        return "{}"


_raw_yaml = st.lists(st.sampled_from(["nvidia:", "scheduler:", "  ", "- ", ": ", "{", "}", "[", "]", "&a ", "*a",
                                      "!!python/object:os.system", "!!binary", "2001-13-45", "0x", "1e999", "~",
                                      "'", '"', "\n", "\t", "#", "---", "...", "%YAML 1.1", "<<: *a", "?"]),
                     max_size=25).map("".join)


def _load(data: bytes) -> EngineConfig | ConfigError:
    with tempfile.NamedTemporaryFile(suffix=".yaml") as f:
        f.write(data)
        f.flush()
        try:
            config = load_config(f.name)
        except ConfigError as exc:
            assert str(exc).strip()
            return exc
        try:  # the vendor plugins validate their own sections when an engine is built
            Engine(config, plugins=PLUGINS)
        except ConfigError as exc:
            assert str(exc).strip()
            return exc
        return config


@_SETTINGS
@given(data=st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    _load(data)


@_SETTINGS
@given(text=_raw_yaml | st.text(max_size=80))
def test_random_yaml_text(text: str) -> None:
    _load(text.encode("utf-8", "surrogatepass"))


@_SETTINGS
@given(config=_config)
def test_random_sections_and_values(config: dict[Any, Any]) -> None:
    _load(_yaml_text(config).encode())


@pytest.mark.parametrize(("text", "names"), [
    ("scheduler:\n  nodeLockTimeout: -1\n", "scheduler.nodeLockTimeout"),
    ("scheduler:\n  gpuSchedulerPolicy: [1]\n", "scheduler.gpuSchedulerPolicy"),
    ("scheduler: 3\n", "scheduler"),
    ("when: 2001-13-45\n", "2001-13-45"),
    ("\xff\xfe garbage", "UTF-8"),
])
def test_errors_name_the_field(text: str, names: str) -> None:
    err = _load(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    assert isinstance(err, ConfigError) and names in str(err), err
