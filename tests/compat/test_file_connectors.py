"""PyFlink's file connector API: ``FileSource.for_record_stream_format`` with the text line
format, and the row-format ``FileSink`` with an ``Encoder``, ``OutputFileConfig`` and a
``RollingPolicy``, written as PyFlink's own word count example writes them (imports
aside)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from weir.common import Duration, Encoder, Types, WatermarkStrategy
from weir.core.errors import InvalidJobError
from weir.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from weir.datastream.connectors import (
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)

LINES = [f"to be or not to be {i % 13} that is question {i % 5}" for i in range(3000)]


def _committed(out: Path, prefix: str, suffix: str) -> list[Path]:
    pattern = re.compile(rf"^{re.escape(prefix)}-\d+-\d+{re.escape(suffix)}$")
    return sorted(p for p in out.iterdir() if pattern.match(p.name))


def test_word_count_as_pyflink_writes_it(tmp_path: Path, runs_on: str) -> None:
    source_file = tmp_path / "hamlet"  # no suffix: the text format reads any file
    source_file.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    ds = env.from_source(
        source=FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                   str(source_file))
        .process_static_file_set().build(),
        watermark_strategy=WatermarkStrategy.for_monotonous_timestamps(),
        source_name="file_source")

    def split(line):
        yield from line.split()

    ds = ds.flat_map(split) \
        .map(lambda i: (i, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()])) \
        .key_by(lambda i: i[0]) \
        .reduce(lambda i, j: (i[0], i[1] + j[1]))
    ds.sink_to(
        sink=FileSink.for_row_format(base_path=str(out),
                                     encoder=Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("prefix")
                                 .with_part_suffix(".ext").build())
        .with_rolling_policy(RollingPolicy.default_rolling_policy())
        .build())
    env.execute()

    expected = Counter(word for line in LINES for word in line.split())
    parts = _committed(out, "prefix", ".ext")
    assert parts, sorted(p.name for p in out.iterdir())
    written = [line for p in parts for line in p.read_text().splitlines()]
    assert sorted(written) == sorted(str((w, n)) for w, n in expected.items())
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # nothing left hidden


def test_a_small_part_size_rolls_parts_and_loses_no_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection(LINES).sink_to(
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=10_000))
        .build())
    env.execute()
    parts = _committed(out, "part", "")
    assert len(parts) > 3  # ~160 KiB of text in parts of about 10 KB
    assert [line for p in sorted(parts, key=lambda p: int(p.name.rsplit("-", 1)[1]))
            for line in p.read_text().splitlines()] == LINES


def test_several_paths_and_a_directory_of_any_file_names(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.log").write_text("1\n2\n")
    (tmp_path / "a" / "two").write_text("3\n")
    (tmp_path / "a" / ".hidden").write_text("never\n")
    (tmp_path / "b.txt").write_text("4\n5\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), str(tmp_path / "a"), str(tmp_path / "b.txt")).build()
    got = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
    assert sorted(got.execute_and_collect()) == ["1", "2", "3", "4", "5"]


def test_monitor_continuously_makes_an_unbounded_source() -> None:
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), "/data") \
        .monitor_continuously(Duration.of_seconds(5)).build()
    assert not source.bounded and source.monitor_interval == 5.0


def test_from_source_type_info_makes_named_rows(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("x\nyy\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                 str(tmp_path / "in.txt")).build()
    rows = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines",
                           type_info=Types.STRING()) \
        .map(lambda s: (s, len(s)),
             output_type=Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()]))
    assert sorted((r.word, r.n) for r in rows.execute_and_collect()) == [("x", 1), ("yy", 2)]


@pytest.mark.parametrize(("build", "names"), [
    (lambda: FileSource.for_bulk_file_format(object(), "/data"), "for_bulk_file_format"),
    (lambda: FileSink.for_bulk_format("/out", object()), "for_bulk_format"),
    (lambda: FileSink.for_row_format("/out", Encoder.simple_string_encoder())
     .with_bucket_assigner(object()), "bucket assigners"),
    (lambda: StreamFormat.text_line_format("latin-1"), "UTF-8"),
])
def test_what_weir_does_not_have_fails_in_one_line(build, names: str) -> None:
    with pytest.raises(InvalidJobError, match=names) as err:
        build()
    assert "\n" not in str(err.value)
