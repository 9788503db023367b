"""From the transformations a program builds to the JobGraph sent to the JobMaster.

Translation resolves virtual nodes (partitioning, union) into edges, fixes each operator's
parallelism, chains operators joined by forward edges of equal parallelism into one vertex
(one task per subtask), and pickles operators one by one so an unpicklable function is
reported with the operator that holds it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from weir.core.errors import InternalError, InvalidJobError
from weir.datastream.code_fingerprint import fingerprint
from weir.operators.keys import KeySpec
from weir.operators.sinks.collect import CollectSinkOperator
from weir.proto import common_pb2, jobgraph_pb2
from weir.state.key_groups import check_parallelism
from weir.taskexecutor.operator import StreamOperator

if TYPE_CHECKING:
    from weir.core.source import Source
    from weir.datastream.connectors.base import PreparedSource

#: How an edge distributes records (the wire enum; FORWARD, REBALANCE, HASH, BROADCAST).
PartitionerType = common_pb2.PartitionerType
FORWARD = common_pb2.FORWARD
REBALANCE = common_pb2.REBALANCE
HASH = common_pb2.HASH
BROADCAST = common_pb2.BROADCAST
PARTITIONER_NAMES = {FORWARD: "FORWARD", REBALANCE: "REBALANCE", HASH: "HASH",
                     BROADCAST: "BROADCAST"}

_ids = itertools.count(1)


@dataclass(eq=False)
class Transformation:
    """A node of the program's graph. ``kind`` is source, operator, sink, partition or union."""

    name: str
    kind: str
    inputs: list[Transformation] = field(default_factory=list)
    operator: StreamOperator | None = None
    #: A Source, or one the client prepares first (a source node's; None on other nodes).
    source: Source | PreparedSource | None = None
    partitioner: PartitionerType | None = None
    key: KeySpec | None = None
    parallelism: int | None = None
    #: Unless set, the parallelism is its input's, not the job's default (Flink's
    #: ``assignTimestampsAndWatermarks``: the watermarks of a source stay in its chain).
    inherits_parallelism: bool = False
    max_parallelism: int | None = None
    uid: str | None = None
    #: Its inputs are the two inputs of a two-input operator (``connect``), not a union.
    two_input: bool = False
    #: A "side" node: the side output of this OutputTag id of its input.
    side_output: str = ""
    #: Chaining hints: begin a new chain here / chain with neither neighbour.
    start_new_chain: bool = False
    disable_chaining: bool = False
    description: str = ""
    #: A partition node's name in execution plans when it is not its partitioner's
    #: (``shuffle()`` and ``rescale()`` partition as ``rebalance()`` does).
    ship_strategy: str = ""
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class _Input:
    node: Transformation
    partitioner: PartitionerType | None
    key: KeySpec | None
    #: Which input of a two-input operator the edge feeds (0 otherwise).
    input_index: int = 0
    #: The producer's side output the edge carries ("" for its main output).
    side_output: str = ""


def _physical_inputs(node: Transformation) -> list[_Input]:
    """Inputs of ``node`` with virtual partition/union nodes folded into edge properties."""
    result: list[_Input] = []

    def walk(t: Transformation, partitioner: PartitionerType | None, key: KeySpec | None,
             index: int, side: str) -> None:
        if t.kind == "partition":
            # The partitioning closest to the consumer wins: rebalance().key_by(k) is keyed.
            if partitioner is None:
                partitioner, key = t.partitioner, t.key
            walk(t.inputs[0], partitioner, key, index, side)
        elif t.kind == "union":
            for upstream in t.inputs:
                walk(upstream, partitioner, key, index, side)
        elif t.kind == "side":
            walk(t.inputs[0], partitioner, key, index, t.side_output)
        else:
            result.append(_Input(t, partitioner, key, index, side))

    for position, upstream in enumerate(node.inputs):
        walk(upstream, None, None, position if node.two_input else 0, "")
    return result


def build_job_graph(sinks: list[Transformation], *, job_id: str, job_name: str,
                    default_parallelism: int, default_max_parallelism: int,
                    config: dict[str, str], chaining: bool = True) -> jobgraph_pb2.JobGraph:
    """Translate the program's graph (reached from ``sinks``) into a JobGraph message."""
    if not sinks:
        msg = ("the job defines no sink: add one (print(), sink_to(...), or use "
               "execute_and_collect()) before calling execute()")
        raise InvalidJobError(msg)
    nodes = _reachable(sinks)
    inputs = {n.id: _physical_inputs(n) for n in nodes}
    downstream: dict[int, int] = {n.id: 0 for n in nodes}
    for n in nodes:
        for edge in inputs[n.id]:
            downstream[edge.node.id] += 1

    parallelism: dict[int, int] = {}
    for n in nodes:  # inputs first: ids grow in the order the program made them
        inherited = [edge.node.id for edge in inputs[n.id]] if n.inherits_parallelism else []
        parallelism[n.id] = parallelism[inherited[0]] if inherited and n.parallelism is None \
            else _parallelism(n, default_parallelism)
    max_par = {n.id: n.max_parallelism or default_max_parallelism for n in nodes}
    for n in nodes:
        try:
            check_parallelism(parallelism[n.id], max_par[n.id])
        except ValueError as err:
            msg = f"operator '{n.name}': {err}"
            raise InvalidJobError(msg) from err

    # Resolve each edge's partitioner, then decide which nodes chain onto their input.
    edges: dict[int, list[_Input]] = {}
    chained_to: dict[int, int] = {}
    for n in nodes:
        resolved = []
        for edge in inputs[n.id]:
            same = parallelism[edge.node.id] == parallelism[n.id]
            part = edge.partitioner
            if part is None:
                part = FORWARD if same else REBALANCE
            if part == FORWARD and not same:
                msg = (f"forward edge from '{edge.node.name}' (parallelism "
                       f"{parallelism[edge.node.id]}) to '{n.name}' (parallelism "
                       f"{parallelism[n.id]}) needs equal parallelism: use rebalance()")
                raise InvalidJobError(msg)
            resolved.append(_Input(edge.node, part, edge.key, edge.input_index,
                                   edge.side_output))
        producers = [edge.node.id for edge in resolved]
        if len(set(producers)) < len(producers):
            twice = next(e.node for e in resolved if producers.count(e.node.id) > 1)
            msg = (f"'{n.name}' reads '{twice.name}' through two edges (a stream connected "
                   "or united with itself): weir exchanges one stream between two "
                   "operators; apply the two functions to the one stream instead")
            raise InvalidJobError(msg)
        edges[n.id] = resolved
        if (chaining and n.kind != "source" and len(resolved) == 1
                and resolved[0].partitioner == FORWARD and not resolved[0].side_output
                and downstream[resolved[0].node.id] == 1 and not n.start_new_chain
                and not n.disable_chaining and not resolved[0].node.disable_chaining):
            chained_to[n.id] = resolved[0].node.id

    heads = [n for n in nodes if n.id not in chained_to]
    chain_of: dict[int, list[Transformation]] = {h.id: [h] for h in heads}
    vertex_of: dict[int, int] = {h.id: h.id for h in heads}
    for n in nodes:  # ids grow along edges, so inputs are always seen first
        if n.id in chained_to:
            head_id = vertex_of[chained_to[n.id]]
            vertex_of[n.id] = head_id
            chain_of[head_id].append(n)

    # A side output belongs to the operator that emits it, and a task sends only its tail
    # operator's side outputs on (taskexecutor/operator_chain.py): nothing may be chained
    # onto an operator whose side output is read.
    for n in nodes:
        for edge in edges[n.id]:
            producer = edge.node
            if edge.side_output and chain_of[vertex_of[producer.id]][-1] is not producer:
                msg = f"the side output of '{producer.name}' is read, yet it is chained on"
                raise InternalError(msg)

    uids = _uids(nodes)
    graph = jobgraph_pb2.JobGraph(job_id=job_id, name=job_name, config=config)
    for head in heads:
        chain = chain_of[head.id]
        vertex = graph.vertices.add(
            id=head.id, name=" -> ".join(t.name for t in chain),
            parallelism=parallelism[head.id], max_parallelism=max_par[head.id])
        operators = [t.operator for t in chain if t.operator is not None]
        for t in chain:
            vertex.operator_names.append(t.name)
            vertex.operator_uids.append(uids[t.id])
            vertex.operator_fingerprints.append(
                fingerprint([t.operator if t.operator is not None else t.source]))
            if t.operator is not None:
                t.operator.uid = uids[t.id]
                _check_picklable(t.operator, t.name)
                if isinstance(t.operator, CollectSinkOperator):
                    graph.has_collect_sink = True
        vertex.chain = cloudpickle.dumps(operators)
        if head.kind == "source":
            vertex.source = _pickle(head.source, head.name)
        for edge in edges[head.id]:
            # Unions feed input 0; a two-input operator's edges say which input they feed.
            vertex.inputs.add(
                source_vertex=vertex_of[edge.node.id], partitioner=edge.partitioner,
                key_selector=_pickle(edge.key, head.name) if edge.key is not None else b"",
                input_index=edge.input_index, side_output=edge.side_output)
    return graph


def execution_plan(graph: jobgraph_pb2.JobGraph, sinks: list[Transformation]) -> dict[str, Any]:
    """The program's operators as Flink's JSON execution plan: a node per operator (``id``,
    ``type``, ``pact``, ``contents``, ``parallelism``) with its ``predecessors`` (``id``,
    ``ship_strategy``, and ``side: "second"`` for the second input of a two-input
    operator). weir adds each operator's ``uid`` and the ``task`` (its chain) it runs in.
    ``graph`` is the JobGraph built from ``sinks``."""
    nodes = _reachable(sinks)
    uids = _uids(nodes)
    vertex_of_uid = {uid: v for v in graph.vertices for uid in v.operator_uids}
    vertex = {n.id: vertex_of_uid[uids[n.id]] for n in nodes if n.id in uids
              and uids[n.id] in vertex_of_uid}
    pacts = {"source": "Data Source", "sink": "Data Sink"}
    plan = []
    for n in nodes:
        if n.id not in vertex:
            continue
        entry: dict[str, Any] = {
            "id": n.id, "type": n.name, "pact": pacts.get(n.kind, "Operator"),
            "contents": n.description or n.name,
            "parallelism": vertex[n.id].parallelism, "uid": uids[n.id],
            "task": vertex[n.id].name}
        predecessors = []
        for position, upstream in enumerate(n.inputs):
            for producer, strategy in _plan_edges(upstream, ""):
                if not strategy:
                    same = vertex[producer.id].parallelism == vertex[n.id].parallelism
                    strategy = "FORWARD" if same else "REBALANCE"
                edge = {"id": producer.id, "ship_strategy": strategy}
                if n.two_input and position == 1:
                    edge["side"] = "second"
                predecessors.append(edge)
        if predecessors:
            entry["predecessors"] = predecessors
        plan.append(entry)
    return {"nodes": plan}


def _plan_edges(t: Transformation, strategy: str) -> list[tuple[Transformation, str]]:
    """The operators feeding an input through ``t``, with the ship strategy of the
    partitioning closest to the consumer ("" for none)."""
    if t.kind == "partition":
        label = t.ship_strategy or PARTITIONER_NAMES.get(t.partitioner or FORWARD, "")
        return _plan_edges(t.inputs[0], strategy or label)
    if t.kind == "union":
        return [edge for upstream in t.inputs for edge in _plan_edges(upstream, strategy)]
    if t.kind == "side":
        return _plan_edges(t.inputs[0], strategy)
    return [(t, strategy)]


def _uids(nodes: list[Transformation]) -> dict[int, str]:
    """Each node's uid: the one the program set, else one derived from the node's place in
    the graph (its position among the nodes, in the order the program built them, and its
    name), which is the same every time the same program builds its graph. State is
    matched to operators by uid on restore."""
    uids: dict[int, str] = {}
    for index, t in enumerate(sorted(nodes, key=lambda t: t.id)):
        uids[t.id] = t.uid or f"{index}:{t.kind}:{t.name}"
    duplicates = [u for u in set(uids.values()) if list(uids.values()).count(u) > 1]
    if duplicates:
        msg = (f"operator uid {duplicates[0]!r} is set on more than one operator: uids "
               "identify state and must be unique")
        raise InvalidJobError(msg)
    return uids


def _reachable(sinks: list[Transformation]) -> list[Transformation]:
    seen: dict[int, Transformation] = {}
    stack = list(sinks)
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen[t.id] = t
            stack.extend(t.inputs)
    return [seen[i] for i in sorted(seen)
            if seen[i].kind not in ("partition", "union", "side")]


def _parallelism(node: Transformation, default: int) -> int:
    if node.kind == "source":
        fixed = getattr(node.source, "fixed_parallelism", None)
        if fixed is not None:
            if node.parallelism not in (None, fixed):
                msg = f"source '{node.name}' only runs with parallelism {fixed}"
                raise InvalidJobError(msg)
            return int(fixed)
    return node.parallelism or default


def _check_picklable(operator: StreamOperator, name: str) -> None:
    for fn in [*operator.functions(), operator]:
        _pickle(fn, name)


def _pickle(obj: Any, name: str) -> bytes:
    try:
        data: bytes = cloudpickle.dumps(obj)  # cloudpickle has no annotations
    except Exception as err:  # pickling can raise nearly anything user objects raise
        msg = (f"cannot serialize the function of operator '{name}': "
               f"{type(err).__name__}: {err} (functions are shipped to the cluster with "
               "cloudpickle: avoid capturing locks, sockets, open files or clients)")
        raise InvalidJobError(msg) from err
    return data

