"""The publish-time pattern language (pipelines/contract/timeformat.py) and
``input.timestamp_format``'s validation: Spark datetime patterns only, a strptime pattern
refused with the Spark pattern it means."""

from __future__ import annotations

import pytest

from pipelines.contract.config import ConfigError, load_config
from pipelines.contract.presets import get_preset
from pipelines.contract.timeformat import (
    TimestampFormatError,
    check_timestamp_format,
    strptime_to_spark,
    to_strptime,
)


@pytest.mark.parametrize(("pattern", "strptime"), [
    ("yyyy-MM-dd HH:mm:ss", "%Y-%m-%d %H:%M:%S"),
    ("dd/MMM/yyyy:HH:mm:ss Z", "%d/%b/%Y:%H:%M:%S %z"),
    ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "%Y-%m-%dT%H:%M:%S.%f%z"),
    ("dd.MM.yy hh:mm a", "%d.%m.%y %I:%M %p"),
    ("EEE, dd MMMM yyyy", "%a, %d %B %Y"),
    ("yyyy-MM-dd'at'HH", "%Y-%m-%dat%H"),
    ("yyyy''MM", "%Y'%m"),
    ("HH:mm:ss.SSSSSS", "%H:%M:%S.%f"),
])
def test_spark_pattern_translates_to_strptime(pattern, strptime):
    assert to_strptime(pattern) == strptime


@pytest.mark.parametrize(("strptime", "spark"), [
    ("%d/%m/%Y %H:%M:%S", "dd/MM/yyyy HH:mm:ss"),
    ("%Y-%m-%dT%H:%M:%S%z", "yyyy-MM-dd'T'HH:mm:ssZ"),
    ("%d/%b/%Y:%H:%M:%S.%f", "dd/MMM/yyyy:HH:mm:ss.SSSSSS"),
    ("%I:%M %p", "hh:mm a"),
])
def test_strptime_pattern_maps_to_the_spark_pattern_it_means(strptime, spark):
    assert strptime_to_spark(strptime) == spark
    assert to_strptime(spark) == strptime


@pytest.mark.parametrize(("value", "message"), [
    ("%d/%m/%Y %H:%M:%S", "is a strptime pattern; timestamp formats are Spark datetime "
                          "patterns: write 'dd/MM/yyyy HH:mm:ss'"),
    ("yyyy-DD", "pattern letters 'DD' in 'yyyy-DD' are not supported"),
    ("yyy-MM-dd", "pattern letters 'yyy'"),
    ("2020", "is neither one of auto, iso, epoch_s"),
    ("yyyy-MM-dd'T", "unclosed quote"),
    ("epoch_sec", "pattern letters 'e'"),
])
def test_unusable_format_is_refused_in_one_sentence(value, message):
    with pytest.raises(TimestampFormatError) as err:
        check_timestamp_format(value)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["auto", "iso", "epoch_s", "epoch_ms", "epoch_us",
                                   "epoch_ns", "dd/MM/yyyy HH:mm:ss Z"])
def test_named_formats_and_spark_patterns_are_accepted(value):
    assert check_timestamp_format(value) == value
    cfg = load_config(None, [f"input.timestamp_format={value}"])
    assert cfg.input.timestamp_format == value


def test_config_refuses_a_strptime_timestamp_format_naming_the_spark_pattern():
    with pytest.raises(ConfigError) as err:
        load_config(None, ['input.timestamp_format="%d/%m/%Y %H:%M:%S"'])
    assert "input.timestamp_format" in str(err.value)
    assert "write 'dd/MM/yyyy HH:mm:ss'" in str(err.value)


def test_every_preset_pattern_is_in_the_supported_language():
    for name in ("online-retail", "apache-logs"):
        spec = get_preset(name)
        assert "%" in to_strptime(spec.publish_time_format)


def test_input_spec_refuses_an_unknown_epoch_unit():
    with pytest.raises(ValueError, match="epoch_unit must be one of"):
        get_preset("contract").replace(epoch_unit="epoch_min")
