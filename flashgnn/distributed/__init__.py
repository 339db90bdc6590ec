"""Training across processes on torch.distributed (NCCL between GPUs, gloo on the CPU).

Full-graph training: ``partition_nodes`` splits the nodes, ``FullGraphPartition`` keeps a
rank's rows of the graph and its halo's exchange lists, ``FullGraphPartition.wrap`` runs a
model on them, each graph layer's halo rows exchanged in blocks of columns (``halo``'s plan,
``aggregation``; GCN through ``projection`` and ``epilogue`` too; ``memory`` estimates what
a rank of GCN, AGNN or GAT holds);
``all_reduce_gradients`` and ``global_count`` combine the ranks' gradients and losses
(``gradients`` says how)."""

from .full_graph import FullGraphPartition
from .gradients import all_reduce_gradients, global_count
from .halo import HaloPlan
from .model import FullGraphModel
from .partition import METHODS, partition_nodes, renumbering

__all__ = [
    "FullGraphPartition",
    "FullGraphModel",
    "HaloPlan",
    "METHODS",
    "all_reduce_gradients",
    "global_count",
    "partition_nodes",
    "renumbering",
]
