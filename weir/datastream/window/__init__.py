"""Windows on keyed streams, as PyFlink's ``pyflink.datastream.window``: the windows,
their assigners, triggers and evictors (this package's names), and the window functions
(:mod:`weir.datastream.window.functions`, named in :mod:`weir.datastream.functions` as in
PyFlink).

A *window assigner* puts each record in zero or more :class:`TimeWindow` s (tumbling,
sliding, session; by event time or processing time). A *trigger* decides when a window's
contents are evaluated (by default: when event time — or the wall clock — passes the end
of the window). The *window function* computes the result: ``reduce`` and ``aggregate``
fold records in as they arrive (one value per window and key is kept), ``process`` sees
every record of the window at once. ``allowed_lateness`` keeps a window's state that much
longer after it fired: a late record within it fires the window again with the updated
result; later ones are dropped (and counted). The operators that run windows are in
:mod:`weir.operators.window`.

Windows are half open, ``[start, end)``; a result carries the timestamp ``end - 1``.

Example:
    >>> from weir.common.time import Time
    >>> w = TumblingEventTimeWindows.of(Time.seconds(10)).assign_windows(None, 12_500)
    >>> w, w[0].max_timestamp()
    ([TimeWindow(start=10000, end=20000)], 19999)
    >>> [x.start for x in SlidingEventTimeWindows.of(Time.seconds(10),
    ...                                               Time.seconds(5)).assign_windows(None, 12_500)]
    [10000, 5000]
"""

from __future__ import annotations

from weir.datastream.window.assigners import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from weir.datastream.window.evictors import CountEvictor, Evictor, TimeEvictor
from weir.datastream.window.triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)
from weir.datastream.window.windows import CountWindow, GlobalWindow, TimeWindow, Window
from weir.unsupported import CUSTOM_MERGING, SERIALIZERS, refusing

__all__ = [
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountEvictor",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "Evictor",
    "GlobalWindow",
    "GlobalWindows",
    "NeverTrigger",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeEvictor",
    "TimeWindow",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "Window",
    "WindowAssigner",
]

__unsupported__ = {
    "MergingWindowAssigner": CUSTOM_MERGING,
    "TimeWindowSerializer": SERIALIZERS,
    "CountWindowSerializer": SERIALIZERS,
}
__getattr__ = refusing(__name__, __unsupported__)
