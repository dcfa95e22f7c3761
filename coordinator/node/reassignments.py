"""`AlterReassignments` and `ListReassignments` (protos/admin.proto): online reassignment, by the node taking the call
(DESIGN §6a). The node's cluster controller writes each coordinator's reassignment to etcd by compare-and-set
(coordinator/cluster/reassignment.py); each coordinator's leader then drives it. A node without a cluster says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from coordinator.base.errors import ErrorCode
from coordinator.cluster.preferred_leaders import ElectionRefused
from coordinator.cluster.reassignment import ReassignmentResult
from coordinator.cluster.store import VersionedAssignment
from coordinator.config.settings import Settings
from coordinator.node.leader_elections import PreferredElector
from protos import admin_pb2 as admin

NOT_A_CLUSTER = "this node is not part of a cluster (no --etcd): it holds every coordinator's only replica"


class Reassigner(Protocol):
    """The node's cluster controller, as these calls use it."""

    @property
    def coordinator_count(self) -> int: ...

    @property
    def replication_factor(self) -> int: ...

    async def reassign(self, reassignments: Sequence[tuple[int, Sequence[int]]]) -> list[ReassignmentResult]: ...

    async def placement(self) -> tuple[dict[int, VersionedAssignment], list[int]]: ...


class ClusterAdmin(PreferredElector, Reassigner, Protocol):
    """The node's cluster controller, as the operator calls use it."""


async def alter_reassignments(
    reassigner: Reassigner | None, settings: Settings, request: admin.AlterReassignmentsRequest
) -> admin.AlterReassignmentsResponse:
    answer = admin.AlterReassignmentsResponse()
    if reassigner is None:
        answer.error_code, answer.error_message = ErrorCode.INVALID_REQUEST, NOT_A_CLUSTER
        return answer
    asked = list(request.reassignments)
    if len(asked) > settings.request_max_items:
        answer.error_code = ErrorCode.INVALID_REQUEST
        answer.error_message = f"{len(asked)} reassignments; at most request.max.items {settings.request_max_items}"
        return answer
    count = reassigner.coordinator_count
    refusals: dict[int, str] = {}
    for item in asked:
        if not 0 <= item.coordinator_id < count:
            refusals[item.coordinator_id] = f"no coordinator {item.coordinator_id}: the cluster has {count}"
        elif sum(1 for other in asked if other.coordinator_id == item.coordinator_id) > 1:
            refusals[item.coordinator_id] = f"coordinator {item.coordinator_id} is named more than once"
    wanted = [(r.coordinator_id, list(r.replicas)) for r in asked if r.coordinator_id not in refusals]
    try:
        results = await reassigner.reassign(wanted) if wanted else []
    except ElectionRefused as error:
        answer.error_code, answer.error_message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{error}: ask another node"
        return answer
    except Exception as error:  # etcd unreachable or slow: what was written stays valid; the caller may retry
        answer.error_code, answer.error_message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"etcd did not answer: {error}"
        return answer
    for result in results:
        refused = result.refusal
        code = ErrorCode.NONE
        if refused:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if result.retriable else ErrorCode.INVALID_REQUEST
        answer.results.append(
            admin.AlterReassignmentsResponse.Result(coordinator_id=result.coordinator_id, error_message=refused)
        )
        answer.results[-1].error_code = code
    for coordinator_id, reason in refusals.items():
        answer.results.append(
            admin.AlterReassignmentsResponse.Result(coordinator_id=coordinator_id, error_message=reason)
        )
        answer.results[-1].error_code = ErrorCode.INVALID_REQUEST
    answer.results.sort(key=lambda r: r.coordinator_id)
    return answer


async def list_reassignments(
    reassigner: Reassigner | None, request: admin.ListReassignmentsRequest
) -> admin.ListReassignmentsResponse:
    answer = admin.ListReassignmentsResponse()
    if reassigner is None:
        answer.error_code, answer.error_message = ErrorCode.INVALID_REQUEST, NOT_A_CLUSTER
        return answer
    try:
        assignments, live = await reassigner.placement()
    except Exception as error:  # etcd unreachable or slow
        answer.error_code, answer.error_message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"etcd did not answer: {error}"
        return answer
    wanted = set(request.coordinator_ids)
    answer.live_nodes.extend(live)
    answer.replication_factor = reassigner.replication_factor
    for coordinator_id in sorted(assignments):
        a = assignments[coordinator_id].assignment
        if (wanted and coordinator_id not in wanted) or not (a.reassigning or request.all_coordinators):
            continue
        answer.coordinators.append(
            admin.ListReassignmentsResponse.Coordinator(
                coordinator_id=coordinator_id, replicas=a.replicas, adding_replicas=a.adding,
                removing_replicas=a.removing, leader=a.leader, leader_epoch=a.leader_epoch, isr=a.isr,
                reassigning=a.reassigning, target_replicas=a.target,
            )
        )  # fmt: skip
    return answer
