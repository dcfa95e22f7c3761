"""AdoptPartition and AbandonAdoption (protos/internal.proto) at a move's target (design §5a): the cut-over, decided by
`move_adoption.check_adopt_partition` through the target's pipeline (a move adopted already answers success), and the
abandon before it (`move_abandon.check_adoption_abandoned`: refused once adopted)."""

from __future__ import annotations

from coordinator.base.result import ItemError, Result
from coordinator.machine.records import AdoptedPartition, CarriedProducer
from coordinator.machine.view import CoordinatorView
from coordinator.runtime.node_coordinators import NodeCoordinators, wire_code
from coordinator.runtime.shard import Operation
from coordinator.topics.move_abandon import check_adoption_abandoned
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


async def abandon_adoption(
    coordinators: NodeCoordinators, request: internal.AbandonAdoptionRequest
) -> internal.AbandonAdoptionResponse:
    """The target gives up a move it has not adopted (move_abandon.check_adoption_abandoned); refused once adopted."""
    target = request.to_coordinator_id
    if not coordinators.hosts(target):
        return internal.AbandonAdoptionResponse(
            error_code=pb.NOT_COORDINATOR, error_message=f"coordinator {target} is not hosted on this node"
        )
    coordinators.require_room([target])
    abandon = Operation(_check_abandon, (request.from_coordinator_id, request.move_id))
    outcome = (await coordinators.run_parts({target: abandon}, request.timeout_ms))[target]
    return internal.AbandonAdoptionResponse(error_code=wire_code(outcome.error_code), error_message=outcome.message)


def _check_abandon(view: CoordinatorView, move: tuple[int, int], now_ms: int) -> Result[ItemError]:
    return check_adoption_abandoned(view, move[0], move[1], now_ms)
