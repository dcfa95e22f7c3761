"""AdoptPartition (protos/internal.proto) at a move's target (design §5a): the cut-over, decided by
`move_adoption.check_adopt_partition` through the target's pipeline; a move adopted already answers success."""

from __future__ import annotations

from coordinator.machine.records import AdoptedPartition, CarriedProducer
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from coordinator.topics.move_adoption import AdoptRequest, check_adopt_partition
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from protos import records_pb2 as rec


def adopted_of(partition: rec.PartitionAdopted) -> AdoptedPartition:
    return AdoptedPartition(
        topic_id=partition.topic_id,
        topic_name=partition.topic_name,
        partition=partition.partition,
        log_start_offset=partition.log_start_offset,
        high_watermark=partition.high_watermark,
        local_log_start_offset=partition.local_log_start_offset,
        remote_max_timestamp=partition.remote_max_timestamp,
        classic_log_start_offset=partition.classic_log_start_offset,
        seal_offset=partition.seal_offset,
        switch_leader_epoch=partition.switch_leader_epoch,
        switch_producers=partition.switch_producers,
        producers=tuple(
            CarriedProducer(
                p.producer_id, p.producer_epoch, p.window, p.last_timestamp, p.coordinator_epoch, p.txn_first_offset
            )
            for p in partition.producers
        ),
        configs=tuple((c.name, c.value) for c in partition.topic_configs),
    )


async def adopt_partition(
    coordinators: NodeCoordinators, request: internal.AdoptPartitionRequest
) -> internal.AdoptPartitionResponse:
    """The target adopts a move whose chunks it staged: it serves the partition from the answer on."""
    target = request.to_coordinator_id
    if not coordinators.hosts(target):
        return internal.AdoptPartitionResponse(
            error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {target} is not hosted on this node"
        )
    adopt = AdoptRequest(request.from_coordinator_id, request.move_id, request.chunks, adopted_of(request.partition))
    coordinators.require_room([target])
    outcome = (await coordinators.run_parts({target: Operation(check_adopt_partition, adopt)}, request.timeout_ms))[
        target
    ]
    return internal.AdoptPartitionResponse(error_code=wire_code(outcome.error_code), error_message=outcome.message)
