"""Checks a submitted JobGraph before the JobMaster registers it.

A JobGraph arrives from any token holder, built by any client version (or by hand). The
scheduler trusts its shape: vertex ids index the execution graph, a forward edge pairs
producer and consumer subtasks one to one, every subtask holds a slot. A malformed graph
would raise deep in the main thread or hold slots for a job that can never run, so the
JobMaster refuses it at submission with one line naming the vertex or edge and the problem.

Pure: no I/O, and no user code runs (pickles are inspected, never loaded).

Example:
    >>> from weir.proto import jobgraph_pb2
    >>> graph = jobgraph_pb2.JobGraph(job_id="0" * 32, name="demo")
    >>> try:
    ...     validate_job_graph(graph)
    ... except JobGraphValidationError as err:
    ...     print(err)
    the job graph has no vertices
"""

from __future__ import annotations

import pickletools
from collections.abc import Iterator

from weir.core.config import Configuration
from weir.core.errors import ConfigError, InvalidJobError
from weir.core.ids import is_valid_job_id
from weir.proto import common_pb2, jobgraph_pb2
from weir.state.key_groups import check_parallelism

#: Logical inputs a head operator may have (one- and two-input operators).
MAX_INPUTS = 2
_NAME_CHARS = 60
#: Longest job and operator name: a name travels in every status answer and log line
#: (metrics cut label values further, to ``MAX_LABEL_VALUE_CHARS``).
MAX_NAME_CHARS = 1024
#: Longest vertex name: the names of a chain's operators, joined.
MAX_VERTEX_NAME_CHARS = 16 * MAX_NAME_CHARS
_MESSAGE_CHARS = 400
_MEMO_OPCODES = {"MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}


class JobGraphValidationError(InvalidJobError):
    """A submitted JobGraph is malformed; the message is one line naming where and what."""


def validate_job_graph(graph: jobgraph_pb2.JobGraph) -> None:
    """Raise JobGraphValidationError on the first problem of ``graph``; return if none.

    Checks the job id, the configuration (every key known, every value parses), each
    vertex (unique id, parallelism within max parallelism, a non-empty operator chain
    that is a pickled list, operator names and uids, a source or inputs but not both),
    each edge (an existing producer other than itself and not read twice, a known
    partitioner, a key selector for HASH, equal parallelism for FORWARD, a valid input
    index) and that the edges form no cycle. Never raises anything else, whatever the message holds.
    """
    problem = next(_problems(graph), None)
    if problem is not None:
        raise JobGraphValidationError(_cut(problem, _MESSAGE_CHARS))


def _problems(graph: jobgraph_pb2.JobGraph) -> Iterator[str]:
    if not is_valid_job_id(graph.job_id):
        yield f"job id {_short(graph.job_id)} is not 32 hex digits"
        return
    if len(graph.name) > MAX_NAME_CHARS:
        yield (f"the job name has {len(graph.name):,} characters; at most {MAX_NAME_CHARS:,} "
               "are allowed (name the job in a few words)")
        return
    yield from _config_problems(graph)
    if not graph.vertices:
        yield "the job graph has no vertices"
        return
    vertices: dict[int, jobgraph_pb2.JobVertex] = {}
    for vertex in graph.vertices:
        if vertex.id in vertices:
            yield (f"vertex id {vertex.id} is used twice: by {_short(vertices[vertex.id].name)} "
                   f"and by {_short(vertex.name)}")
            return
        vertices[vertex.id] = vertex
    uid_owner: dict[str, int] = {}
    for vertex in graph.vertices:
        yield from _vertex_problems(vertex, uid_owner)
    for vertex in graph.vertices:
        producers: set[int] = set()
        for index, edge in enumerate(vertex.inputs):
            yield from _edge_problems(vertex, index, edge, vertices)
            if edge.source_vertex in producers:
                # Partitions are keyed by producer attempt and consumer vertex: a second edge
                # would share the first one's partition (measured: the job hangs).
                yield (f"edge {index} into {_vertex(vertex)}: reads vertex "
                       f"{edge.source_vertex} a second time (one edge per pair of vertices)")
            producers.add(edge.source_vertex)
    cycle = _find_cycle(vertices)
    if cycle:
        yield ("the job graph has a cycle: vertices " + " -> ".join(map(str, cycle))
               + " (a job graph must be acyclic)")


def _config_problems(graph: jobgraph_pb2.JobGraph) -> Iterator[str]:
    for key, value in graph.config.items():
        try:
            Configuration().set_raw(key, value)
        except ConfigError as err:
            yield f"job configuration: {_one_line(str(err))}"
            return
        except Exception as err:  # a parser's own failure: still the value's fault
            yield (f"job configuration: invalid value for '{_one_line(key)}': "
                   f"{type(err).__name__}: {_one_line(str(err))}")
            return


def _vertex_problems(vertex: jobgraph_pb2.JobVertex, uid_owner: dict[str, int]
                     ) -> Iterator[str]:
    where = _vertex(vertex)
    if len(vertex.name) > MAX_VERTEX_NAME_CHARS:
        yield (f"{where}: the name has {len(vertex.name):,} characters; at most "
               f"{MAX_VERTEX_NAME_CHARS:,} are allowed")
    for name in vertex.operator_names:
        if len(name) > MAX_NAME_CHARS:
            yield (f"{where}: operator name {_short(name)} has {len(name):,} characters; at "
                   f"most {MAX_NAME_CHARS:,} are allowed")
    try:
        check_parallelism(vertex.parallelism, vertex.max_parallelism)
    except ValueError as err:
        yield f"{where}: {err}"
    if not vertex.chain:
        yield f"{where}: the operator chain is empty (no pickled operator list)"
    else:
        operators = _pickled_list_length(vertex.chain)
        if operators is None:
            yield f"{where}: the operator chain is not a pickled list of operators"
        elif operators == 0 and not vertex.source:
            yield f"{where}: the operator chain has no operators and the vertex no source"
    if not vertex.operator_uids:
        yield f"{where}: no operator uids (every operator of the chain needs one)"
    if len(vertex.operator_names) != len(vertex.operator_uids):
        yield (f"{where}: {len(vertex.operator_names)} operator names but "
               f"{len(vertex.operator_uids)} operator uids (one of each per operator)")
    for uid in vertex.operator_uids:
        if not uid:
            yield f"{where}: an operator uid is empty"
        elif uid in uid_owner:
            yield (f"{where}: operator uid {_short(uid)} is also used in vertex "
                   f"{uid_owner[uid]} (uids identify state and must be unique)")
        uid_owner.setdefault(uid, vertex.id)
    if vertex.source and vertex.inputs:
        yield f"{where}: a source vertex has {len(vertex.inputs)} input(s); sources have none"
    if not vertex.source and not vertex.inputs:
        yield f"{where}: has neither a source nor inputs, so nothing would feed it"


def _edge_problems(vertex: jobgraph_pb2.JobVertex, index: int, edge: jobgraph_pb2.JobEdge,
                   vertices: dict[int, jobgraph_pb2.JobVertex]) -> Iterator[str]:
    where = f"edge {index} into {_vertex(vertex)}"
    producer = vertices.get(edge.source_vertex)
    if producer is None:
        yield f"{where}: reads vertex {edge.source_vertex}, which the job graph does not have"
        return
    if producer.id == vertex.id:
        yield f"{where}: reads the vertex itself (a self-loop)"
        return
    if edge.partitioner not in common_pb2.PartitionerType.values():
        known = ", ".join(common_pb2.PartitionerType.keys())
        yield f"{where}: unknown partitioner {edge.partitioner} (known: {known})"
        return
    if edge.partitioner == common_pb2.HASH and not edge.key_selector:
        yield f"{where}: a HASH edge needs a key selector"
    if edge.partitioner == common_pb2.FORWARD and producer.parallelism != vertex.parallelism:
        yield (f"{where}: a FORWARD edge needs equal parallelism, but vertex {producer.id} "
               f"has {producer.parallelism} and vertex {vertex.id} {vertex.parallelism}")
    if not 0 <= edge.input_index < MAX_INPUTS:
        yield (f"{where}: input index {edge.input_index} (operators have inputs 0 to "
               f"{MAX_INPUTS - 1})")


def _find_cycle(vertices: dict[int, jobgraph_pb2.JobVertex]) -> list[int]:
    """A cycle of ``vertices`` as ids (first id repeated at the end), or [] if acyclic.

    Iterative depth-first search over edges producer -> consumer, so that a long chain of
    vertices cannot exhaust the interpreter's stack.
    """
    consumers: dict[int, list[int]] = {v: [] for v in vertices}
    for vertex in vertices.values():
        for edge in vertex.inputs:
            if edge.source_vertex in consumers:
                consumers[edge.source_vertex].append(vertex.id)
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for root in vertices:
        if root in state:
            continue
        path = [root]
        state[root] = 1
        stack = [iter(consumers[root])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(consumers[nxt]))
    return []


def _pickled_list_length(data: bytes) -> int | None:
    """0 if ``data`` pickles an empty list, 1 if a non-empty one, None if no list at all.

    Reads only the first few opcodes: enough to tell the list apart, however large it is.
    """
    try:
        ops = (op.name for op, _arg, _pos in pickletools.genops(data))
        name = next(ops)
        while name in ("PROTO", "FRAME"):
            name = next(ops)
        if name == "EMPTY_LIST":
            following = next(ops)
            while following in _MEMO_OPCODES:
                following = next(ops)
            return 0 if following == "STOP" else 1
        if name == "MARK":  # protocols 0 and 1: MARK items... LIST
            return 0 if next(ops) == "LIST" else 1
    except Exception:  # whatever a damaged pickle makes the opcode reader raise
        return None
    return None


def _vertex(vertex: jobgraph_pb2.JobVertex) -> str:
    return f"vertex {vertex.id} ({_short(vertex.name)})"


def _short(text: str) -> str:
    """``text`` quoted on one line, cut to a readable length."""
    return repr(_cut(text, _NAME_CHARS))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())
