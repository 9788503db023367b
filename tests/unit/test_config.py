"""Typed configuration: parsing, validation, YAML, -D overrides, env vars (weir.core.config)."""

from __future__ import annotations

import os
import re

import pytest

from weir.core import options
from weir.core.config import (
    ByteSize,
    Configuration,
    Option,
    Seconds,
    all_options,
    non_negative,
    options_reference_markdown,
    positive,
)
from weir.core.errors import ConfigError, UserError


@pytest.fixture(autouse=True)
def _no_weir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's environment must not leak into option defaults."""
    for name in list(os.environ):
        if name.startswith("WEIR_"):
            monkeypatch.delenv(name)


# --- Seconds and ByteSize ---------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("100 ms", 0.1),
    ("100ms", 0.1),
    ("10s", 10.0),
    ("10 s", 10.0),
    ("1.5 s", 1.5),
    (" 2 seconds ", 2.0),
    ("1 min", 60.0),
    ("2m", 120.0),
    ("1 h", 3600.0),
    ("2 hours", 7200.0),
    ("1d", 86400.0),
    ("0", 0.0),
    ("250", 0.25),  # no unit: milliseconds, as in Flink
    ("5 MS", 0.005),
    (.5, 0.0005),
    (2000, 2.0),  # YAML numbers are milliseconds too
])
def test_duration_parse(text, seconds) -> None:
    value = Seconds.parse(text)
    assert isinstance(value, Seconds)
    assert value == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "fast", "-1 s", "10 weeks", "1..5 s", "s", "1 s 2"])
def test_duration_rejects(text) -> None:
    with pytest.raises(ValueError, match=r"duration"):
        Seconds.parse(text)


@pytest.mark.parametrize(("text", "size"), [
    ("32kb", 32 * 1024),
    ("32 KB", 32 * 1024),
    ("64 mb", 64 * 1024**2),
    ("1gb", 1024**3),
    ("1 t", 1024**4),
    ("512", 512),
    ("7b", 7),
    (4096, 4096),
])
def test_memory_size_parse(text, size) -> None:
    value = ByteSize.parse(text)
    assert isinstance(value, ByteSize)
    assert value == size


@pytest.mark.parametrize("text", ["1.5mb", "lots", "-1kb", "10 pb", ""])
def test_memory_size_rejects(text) -> None:
    with pytest.raises(ValueError, match=r"not a memory size"):
        ByteSize.parse(text)


# --- Option ------------------------------------------------------------------------------


def test_option_parses_its_type() -> None:
    assert options.PARALLELISM.parse(" 4 ") == 4
    assert options.BUFFER_TIMEOUT.parse("250 ms") == pytest.approx(0.25)
    assert options.SEGMENT_SIZE.parse("64kb") == 65536
    flag = Option("test.flag", bool, default=False, doc="")
    assert [flag.parse(v) for v in ("true", "YES", "1", "on", True)] == [True] * 5
    assert [flag.parse(v) for v in ("false", "No", "0", "off", False)] == [False] * 5
    assert Option("test.ratio", float, default=None, doc="").parse("0.25") == 0.25


def test_option_defaults() -> None:
    assert options.PARALLELISM.default_value() == 1
    assert options.BUFFER_TIMEOUT.default_value() == pytest.approx(0.1)
    assert options.SEGMENT_SIZE.default_value() == 32 * 1024
    assert options.JOBMASTER_ADDRESS.default_value() is None


@pytest.mark.parametrize(("option", "raw", "problem"), [
    (options.PARALLELISM, "four", "invalid literal"),
    (options.PARALLELISM, "0", "must be greater than 0"),
    (options.PARALLELISM, "-3", "must be greater than 0"),
    (options.BUFFER_TIMEOUT, "soon", "not a duration"),
    (options.SEGMENT_SIZE, "big", "not a memory size"),
    (options.RUNTIME_MODE, "MICRO", f"accepted: {', '.join(options.RUNTIME_MODE.choices)}"),
])
def test_bad_values_name_the_key(option, raw, problem) -> None:
    with pytest.raises(ConfigError) as info:
        option.parse(raw)
    message = str(info.value)
    assert f"'{option.key}'" in message
    assert problem in message
    assert isinstance(info.value, UserError)


def test_bool_option_rejects_other_words() -> None:
    flag = Option("test.flag", bool, default=False, doc="")
    with pytest.raises(ConfigError, match=r"'test.flag'.*not a boolean"):
        flag.parse("maybe")


def test_choices_match_case_insensitively_and_give_the_declared_spelling() -> None:
    mode = Option("test.mode", str, default="FAST", choices=("FAST", "Safe"), doc="")
    assert mode.parse("fast") == "FAST"
    assert mode.parse("SAFE") == "Safe"
    with pytest.raises(ConfigError, match=r"'test.mode': 'slow' \(accepted: FAST, Safe\)"):
        mode.parse("slow")
    assert options.RUNTIME_MODE.parse("streaming") == "STREAMING"


def test_validators() -> None:
    assert positive(1) is None
    assert positive(0) is not None
    assert non_negative(0) is None
    assert non_negative(-1) is not None
    assert options.BUFFER_TIMEOUT.parse("0 ms") == 0.0


def test_env_var_names() -> None:
    assert options.PARALLELISM.env_var == "WEIR_PARALLELISM_DEFAULT"
    assert options.SEGMENT_SIZE.env_var == "WEIR_TASKMANAGER_MEMORY_SEGMENT_SIZE"
    assert options.METRICS_PORT.env_var == "WEIR_METRICS_REPORTER_PROM_PORT"


# --- Configuration -------------------------------------------------------------------------


def test_from_pairs_and_get() -> None:
    conf = Configuration.from_pairs({"parallelism.default": "4",
                                     "execution.buffer-timeout": "5 ms"})
    assert conf.get(options.PARALLELISM) == 4
    assert conf.get(options.BUFFER_TIMEOUT) == pytest.approx(0.005)
    assert conf.get(options.BATCH_SIZE) == options.BATCH_SIZE.default_value()
    assert conf.contains(options.PARALLELISM)
    assert not conf.contains(options.BATCH_SIZE)
    assert conf.to_dict() == {"parallelism.default": "4", "execution.buffer-timeout": "5 ms"}
    pairs = Configuration.from_pairs([("pipeline.batch-size", 10)])
    assert pairs.get(options.BATCH_SIZE) == 10


def test_unknown_key_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"unknown configuration key 'parallelism.defualt' "
                                          r"\(did you mean 'parallelism.default'\?\)"):
        Configuration.from_pairs({"parallelism.defualt": "2"})


def test_unknown_key_without_anything_close() -> None:
    with pytest.raises(ConfigError, match=r"'zzz' .*configuration reference"):
        Configuration().set_raw("zzz", "1")


def test_invalid_value_is_rejected_when_set() -> None:
    conf = Configuration()
    with pytest.raises(ConfigError, match=r"'pipeline.batch-size'"):
        conf.set_raw("pipeline.batch-size", "0")
    assert not conf.contains(options.BATCH_SIZE)
    with pytest.raises(ConfigError, match=r"'pipeline.batch-size'"):
        conf.set(options.BATCH_SIZE, -1)


def test_set_is_chainable_and_validated() -> None:
    conf = Configuration().set(options.PARALLELISM, 3).set(options.RUNTIME_MODE, "streaming")
    assert conf.get(options.PARALLELISM) == 3
    assert conf.get(options.RUNTIME_MODE) == "STREAMING"


def test_env_var_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = Configuration()
    monkeypatch.setenv("WEIR_PARALLELISM_DEFAULT", "7")
    monkeypatch.setenv("WEIR_EXECUTION_BUFFER_TIMEOUT", "1 s")
    assert conf.get(options.PARALLELISM) == 7
    assert conf.get(options.BUFFER_TIMEOUT) == 1.0
    assert conf.contains(options.PARALLELISM)
    # An explicitly set value wins over the environment.
    conf.set_raw("parallelism.default", "2")
    assert conf.get(options.PARALLELISM) == 2


def test_bad_env_var_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIR_PIPELINE_MAX_PARALLELISM", "lots")
    with pytest.raises(ConfigError, match=r"'pipeline.max-parallelism'"):
        Configuration().get(options.MAX_PARALLELISM)


def test_merged_applies_overrides_on_a_copy() -> None:
    base = Configuration.from_pairs({"parallelism.default": "2", "pipeline.batch-size": "8"})
    merged = base.merged({"parallelism.default": "5"})
    assert merged.get(options.PARALLELISM) == 5
    assert merged.get(options.BATCH_SIZE) == 8
    assert base.get(options.PARALLELISM) == 2
    with pytest.raises(ConfigError, match=r"did you mean"):
        base.merged({"pipeline.batch-sise": "1"})


# --- loading: YAML and -D ------------------------------------------------------------------


def test_yaml_flat_keys(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("parallelism.default: 3\nexecution.buffer-timeout: 20 ms\n"
                    "taskmanager.memory.segment-size: 64kb\n")
    conf = Configuration.load(path)
    assert conf.get(options.PARALLELISM) == 3
    assert conf.get(options.BUFFER_TIMEOUT) == pytest.approx(0.02)
    assert conf.get(options.SEGMENT_SIZE) == 65536


def test_yaml_nested_keys(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("parallelism:\n  default: 6\n"
                    "pipeline:\n  max-parallelism: 64\n  batch-size: 100\n"
                    "taskmanager:\n  memory:\n    segment-size: 1kb\n"
                    "heartbeat.timeout: 3 s\n")
    conf = Configuration.load(str(path))
    assert conf.get(options.PARALLELISM) == 6
    assert conf.get(options.MAX_PARALLELISM) == 64
    assert conf.get(options.BATCH_SIZE) == 100
    assert conf.get(options.SEGMENT_SIZE) == 1024
    assert conf.get(options.HEARTBEAT_TIMEOUT) == 3.0


def test_yaml_unknown_nested_key_is_named_in_full(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("pipeline:\n  batch-sise: 100\n")
    with pytest.raises(ConfigError, match=r"'pipeline.batch-sise'.*'pipeline.batch-size'"):
        Configuration.load(path)


def test_yaml_bad_value_names_the_key(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("pipeline:\n  batch-size: many\n")
    with pytest.raises(ConfigError, match=r"'pipeline.batch-size'"):
        Configuration.load(path)


def test_yaml_empty_value_leaves_the_option_unset(tmp_path, monkeypatch) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("parallelism.default:\njobmaster.address: ~\n")
    conf = Configuration.load(path)
    assert conf.get(options.PARALLELISM) == 1
    assert conf.get(options.JOBMASTER_ADDRESS) is None
    assert conf.to_dict() == {}
    monkeypatch.setenv("WEIR_PARALLELISM_DEFAULT", "9")
    assert conf.get(options.PARALLELISM) == 9


def test_empty_yaml_file(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("# nothing set\n")
    assert Configuration.load(path).to_dict() == {}


@pytest.mark.parametrize(("content", "problem"), [
    ("parallelism.default: [1\n", "not valid YAML"),
    ("- 1\n- 2\n", "must hold a mapping"),
])
def test_yaml_file_problems(tmp_path, content, problem) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=problem) as info:
        Configuration.load(path)
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"config file not found"):
        Configuration.load(tmp_path / "absent.yaml")


def test_dynamic_properties_override_the_file(tmp_path) -> None:
    path = tmp_path / "conf.yaml"
    path.write_text("parallelism.default: 3\npipeline.batch-size: 10\n")
    conf = Configuration.load(path, ["parallelism.default=8", " client.timeout = 5 s "])
    assert conf.get(options.PARALLELISM) == 8
    assert conf.get(options.BATCH_SIZE) == 10
    assert conf.get(options.CLIENT_TIMEOUT) == 5.0
    assert conf.to_dict()["parallelism.default"] == "8"


def test_dynamic_property_with_equals_in_the_value() -> None:
    conf = Configuration.load(None, ["security.auth.token=a=b"])
    assert conf.get(options.AUTH_TOKEN) == "a=b"


@pytest.mark.parametrize(("pairs", "problem"), [
    (["parallelism.default"], "-D expects key=value"),
    (["parallelism.default=x"], "'parallelism.default'"),
    (["parallelism.defaul=2"], "did you mean 'parallelism.default'"),
])
def test_dynamic_property_problems(pairs, problem) -> None:
    with pytest.raises(ConfigError, match=problem):
        Configuration.load(None, pairs)


# --- registry and reference ----------------------------------------------------------------


def test_every_declared_option_is_registered() -> None:
    registry = all_options()
    declared = [v for v in vars(options).values() if isinstance(v, Option)]
    assert declared
    for option in declared:
        assert registry[option.key] is option
    for key, option in registry.items():
        assert key == option.key or key in option.deprecated_keys


def test_reference_lists_every_option_once() -> None:
    table = options_reference_markdown()
    lines = table.splitlines()
    assert lines[0] == "| key | default | type | description |"
    keys = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    unique = {option.key for option in all_options().values()}
    assert sorted(keys) == sorted(unique)
    assert len(lines) == 2 + len(unique)
    for option in all_options().values():
        row = next(line for line in lines if line.startswith(f"| `{option.key}` |"))
        assert f"`{option.env_var}`" in row
        assert option.type.__name__ in row
    parallelism = next(line for line in lines if "`parallelism.default`" in line)
    assert "`1`" in parallelism
    mode = next(line for line in lines if "`execution.runtime-mode`" in line)
    assert f"One of: {', '.join(options.RUNTIME_MODE.choices)}." in mode
