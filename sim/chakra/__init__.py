"""MLCommons Chakra execution traces (ETs): the format, read and written without protoc.

One ET file per rank (``PREFIX.RANK.et``): a ``GlobalMetadata`` message, then ``Node``
messages, each after its length as a varint. The schema is shipped as data
(``et_def.proto``) and turned into protobuf classes at run time; reading and writing need
the ``[chakra]`` extra (``protobuf``), the in-memory model and the matching do not.
docs/chakra.md describes the format, what ASTRA-sim reads, and how a step's task graph maps
to and from Chakra nodes.

>>> from sim.chakra import Node
>>> Node(0, "ar", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_bytes=64).comm_type
'ALL_REDUCE'
"""

from __future__ import annotations

from sim.chakra.codec import decode_trace, encode_trace
from sim.chakra.groups import (
    comm_groups_json,
    group_key,
    groups_from_metadata,
    parse_comm_groups,
    read_comm_groups,
)
from sim.chakra.matching import Collective, PointToPoint, match_collectives, match_p2p
from sim.chakra.ops import CHAKRA_TYPES, CLUSTERSIM_OPS, comm_size, op_bytes
from sim.chakra.ranks import (
    TraceSet,
    rank_files,
    read_trace,
    read_traces,
    write_trace,
    write_traces,
)
from sim.chakra.schema import COLLECTIVE_TYPES, NODE_TYPES
from sim.chakra.stream import MAX_TRACE_BYTES
from sim.chakra.trace import (
    KNOWN_ATTRS,
    Attr,
    IOInfo,
    Metadata,
    Node,
    Trace,
    check_trace,
    topological_order,
)

__all__ = [
    "CHAKRA_TYPES",
    "CLUSTERSIM_OPS",
    "COLLECTIVE_TYPES",
    "KNOWN_ATTRS",
    "MAX_TRACE_BYTES",
    "NODE_TYPES",
    "Attr",
    "Collective",
    "IOInfo",
    "Metadata",
    "Node",
    "PointToPoint",
    "Trace",
    "TraceSet",
    "check_trace",
    "comm_groups_json",
    "comm_size",
    "decode_trace",
    "encode_trace",
    "group_key",
    "groups_from_metadata",
    "match_collectives",
    "match_p2p",
    "op_bytes",
    "parse_comm_groups",
    "rank_files",
    "read_comm_groups",
    "read_trace",
    "read_traces",
    "topological_order",
    "write_trace",
    "write_traces",
]
