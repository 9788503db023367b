"""StateTtlConfig as PyFlink programs build it, cleanup strategies included: the state
expires as configured whichever strategies the builder was given."""

from __future__ import annotations

import pytest

from weir import (
    KeyedProcessFunction,
    StateTtlConfig,
    StreamExecutionEnvironment,
    Time,
    ValueStateDescriptor,
)

pytestmark = pytest.mark.usefixtures("runs_on")


class SeenBefore(KeyedProcessFunction):
    def open(self, runtime_context):
        ttl = (StateTtlConfig.new_builder(Time.seconds(60))
               .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
               .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
               .set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
               .disable_cleanup_in_background()
               .cleanup_full_snapshot()
               .cleanup_incrementally(10, False)
               .cleanup_in_rocksdb_compact_filter(1000, Time.hours(1))
               .build())
        descriptor = ValueStateDescriptor("seen")
        descriptor.enable_time_to_live(ttl)
        self.seen = runtime_context.get_state(descriptor)

    def process_element(self, value, ctx):
        yield value, self.seen.value() is not None
        self.seen.update(True)


def test_a_ttl_config_with_cleanup_strategies_builds_and_keeps_state() -> None:
    config = (StateTtlConfig.new_builder(Time.seconds(1)).cleanup_full_snapshot()
              .cleanup_incrementally(5, True).build())
    assert config.ttl_ms == 1000
    assert config.cleanup_strategies == {"full_snapshot": True, "incremental": (5, True)}
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    words = ["a", "b", "a", "c", "b", "a"]
    got = env.from_collection(words).key_by(lambda w: w).process(SeenBefore())
    firsts = {w: words.index(w) for w in words}
    expected = [(w, i != firsts[w]) for i, w in enumerate(words)]
    assert sorted(got.execute_and_collect()) == sorted(expected)
