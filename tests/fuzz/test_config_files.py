"""Fuzz device-config.yaml through :func:`load_config` and the vendor plugins that validate their sections:
random bytes, random YAML and well-formed YAML with random values give a configuration or a
:class:`ConfigError` whose message names the file or the field, never another exception."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
import yaml
from fuzz_helpers import all_vendor_engine, json_values
from hypothesis import HealthCheck, assume, given, settings
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


# ----------------------------------------------------------------------- traps of YAML itself (issue 26)
_LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))
_LAUGHS = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + _LAUGHS + "nvidia:\n  knownMigGeometries: *l9\n"


@pytest.fixture(params=["libyaml", "python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the loader over libyaml's parser (when PyYAML has it) and over PyYAML's pure-Python one."""
    from hami_core.plugins import yamlload

    if request.param == "python":
        monkeypatch.setattr(yamlload, "_BoundedLoader", yamlload._PyBoundedLoader)
    elif not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml")
    return request.param


def _config_error(tmp_path: Any, text: str | bytes) -> str:
    path = tmp_path / "device-config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    message = str(info.value)
    assert str(path) in message and "\n" not in message.strip(), message
    return message


@pytest.mark.parametrize(("text", "needles"), [
    ("nvidia:\n  deviceSplitCount: 4\nscheduler: {}\nnvidia:\n  deviceSplitCount: 8\n",
     ["line 4", "duplicate key 'nvidia'", "first at line 1"]),
    ("nvidia:\n  deviceSplitCount: 4\n  defaultMemory: 1\n  deviceSplitCount: 8\n",
     ["line 4", "duplicate key 'deviceSplitCount'", "first at line 2"]),
    ("scheduler: {nodeLockTimeout: 5, nodeLockTimeout: 6}\n", ["line 1", "duplicate key 'nodeLockTimeout'"]),
])
def test_duplicate_keys_name_the_line_and_the_key(tmp_path: Any, parser: str, text: str, needles: list[str]) -> None:
    message = _config_error(tmp_path, text)
    assert all(n in message for n in needles), message


def test_merge_keys_may_override_what_they_merge(tmp_path: Any, parser: str) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("x-defaults: &d {deviceSplitCount: 4, defaultMemory: 100}\n"
                    "nvidia:\n  <<: *d\n  deviceSplitCount: 8\n")
    config = load_config(str(path))
    assert config.devices["nvidia"] == {"deviceSplitCount": 8, "defaultMemory": 100}


@pytest.mark.parametrize(("text", "needle"), [
    (_LAUGHS, "aliases expand to more than"),                                # 10**10 nodes from 1 KiB
    ("nvidia: &n\n  knownMigGeometries: [*n]\n", "self-reference"),          # a cyclic object
    ("a: &a [*a]\n", "self-reference"),
    ("nvidia:\n  knownMigGeometries: " + "[" * 150 + "]" * 150 + "\n", "nests deeper than"),
    ("nvidia:\n  knownMigGeometries: *nowhere\n", "undefined alias"),
])
def test_alias_bombs_cycles_and_deep_nesting_fail_fast(tmp_path: Any, parser: str, text: str, needle: str) -> None:
    assert needle in _config_error(tmp_path, text)


def test_a_config_file_larger_than_the_limit_is_refused_before_parsing(tmp_path: Any) -> None:
    from hami_core.plugins.yamlload import MAX_CONFIG_BYTES

    message = _config_error(tmp_path, b"# " + b"x" * MAX_CONFIG_BYTES + b"\nnvidia: {}\n")
    assert "limit" in message


@pytest.mark.parametrize(("text", "field"), [
    ("scheduler: {nodeLockTimeout: .inf}\n", "scheduler.nodeLockTimeout"),
    ("scheduler: {nodeLockTimeout: 1e308}\n", "scheduler.nodeLockTimeout"),
    ("scheduler: {fgd: {window: 10000000000}}\n", "scheduler.fgd.window"),
    ("scheduler: {fgd: {cacheMiB: 99999999999}}\n", "scheduler.fgd.cacheMiB"),
    ("scheduler: {fgd: {workload: [{nums: 3000000}]}}\n", "scheduler.fgd.workload.0.nums"),
    ("scheduler: {fgd: {workload: [{weight: .inf}]}}\n", "scheduler.fgd.workload.0.weight"),
    ("scheduler: {fgd: {workload: [{cpuMilli: .nan}]}}\n", "scheduler.fgd.workload.0.cpuMilli"),
    ("nvidia: {deviceSplitCount: 3000000}\n", "nvidia.deviceSplitCount"),
    ("nvidia: {deviceMemoryScaling: .inf}\n", "nvidia.deviceMemoryScaling"),
    ("nvidia: {deviceMemoryScaling: 1e308}\n", "nvidia.deviceMemoryScaling"),
    ("vnpus: {configs: [{commonWord: A, resourceName: a/b, memoryCapacity: 99999999999}]}\n",
     "vnpus.configs.0.memoryCapacity"),
    ("scheduler: {nodeLockTimeout: 1" + "0" * 5000 + "}\n", "line 1"),   # Python refuses 5000-digit ints
])
def test_huge_and_infinite_numbers_name_the_field(tmp_path: Any, text: str, field: str) -> None:
    err = _load(text.encode())
    assert isinstance(err, ConfigError) and field in str(err), err


@_SETTINGS
@given(config=_config, dup=st.sampled_from(SECTIONS))
def test_any_duplicated_section_is_an_error(config: dict[Any, Any], dup: str) -> None:
    text = _yaml_text({dup: {"x": 1}, **{k: v for k, v in config.items() if k != dup}})
    assume(text != "{}")  # not dumpable as YAML
    err = _load((text + f"{dup}: {{}}\n").encode())
    assert isinstance(err, ConfigError) and f"duplicate key {dup!r}" in str(err), err
