"""Device models of Arm NPUs and GPUs (Ethos-U55/U65/U85, Mali) and graph partitioning.

    pg = tosa_jax.hw_models.partition(graph, "ethos-u55-128")   # placement + partitions
    pg.model()(x)                                                # each partition on a JAX device
    cost = tosa_jax.hw_models.estimate(pg)                       # cycles, time, memory
    print(tosa_jax.hw_models.table(cost)); svg(pg, cost, "net.svg")
"""

from tosa_jax.hw_models.cost import NetworkCost, OpCost, PartitionCost, TransferCost, estimate
from tosa_jax.hw_models.devices import DEVICES, DeviceModel, get_device
from tosa_jax.hw_models.partition import (
    Partition,
    PartitionedGraph,
    PartitionedModel,
    TosaPartitionError,
    Transfer,
    default_fallback,
    load_partitioned,
    partition,
)
from tosa_jax.hw_models.report import report_dict, svg, table

__all__ = [
    "DEVICES", "DeviceModel", "NetworkCost", "OpCost", "Partition", "PartitionCost",
    "PartitionedGraph", "PartitionedModel", "TosaPartitionError", "Transfer", "TransferCost",
    "default_fallback", "estimate", "get_device", "load_partitioned", "partition", "report_dict",
    "svg", "table",
]
