"""Stream operators, the runtime side of the user API: what runs inside a task's operator
chain (the task's contract is ``weir.taskexecutor.operator``). One module per kind of
operator, and a package each for windows (:mod:`weir.operators.window`) and sinks
(:mod:`weir.operators.sinks`); what a program writes to configure them is under PyFlink's
paths (``weir.datastream``, ``weir.common``)."""
