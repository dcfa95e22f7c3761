"""`ElectLeaders` (protos/admin.proto): preferred leader elections at once, by the node taking the call (DESIGN §6a).

The node's cluster controller does them, each a compare-and-set in etcd (coordinator/cluster/preferred_leaders.py).
A node without a cluster says so: alone it leads every coordinator, there is no other replica to prefer.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from coordinator.base.errors import ErrorCode
from coordinator.cluster.preferred_leaders import ElectionOutcome, ElectionRefused, PreferredElection
from coordinator.config.settings import Settings
from protos import admin_pb2 as admin

_OUTCOMES = {
    ElectionOutcome.ELECTED: admin.LEADER_ELECTED,
    ElectionOutcome.ALREADY_PREFERRED: admin.LEADER_ALREADY_PREFERRED,
    ElectionOutcome.NOT_POSSIBLE: admin.LEADER_ELECTION_NOT_POSSIBLE,
}


class PreferredElector(Protocol):
    """The node's cluster controller, as this call uses it."""

    @property
    def coordinator_count(self) -> int: ...

    async def elect_preferred_leaders(self, coordinator_ids: Collection[int] = ()) -> list[PreferredElection]: ...


def _refused(code: ErrorCode, message: str) -> admin.ElectLeadersResponse:
    answer = admin.ElectLeadersResponse(error_message=message)
    answer.error_code = code
    return answer


async def elect_leaders(
    elector: PreferredElector | None, settings: Settings, request: admin.ElectLeadersRequest
) -> admin.ElectLeadersResponse:
    if elector is None:
        return _refused(
            ErrorCode.INVALID_REQUEST,
            "this node is not part of a cluster (no --etcd): it leads every coordinator, there is no preferred "
            "replica to elect",
        )
    asked = list(request.coordinator_ids)
    if len(asked) > settings.request_max_items:
        return _refused(ErrorCode.INVALID_REQUEST, f"{len(asked)} coordinator ids; at most request.max.items")
    count = elector.coordinator_count
    unknown = [c for c in dict.fromkeys(asked) if not 0 <= c < count]
    known = [c for c in asked if 0 <= c < count]
    try:
        results = await elector.elect_preferred_leaders(known) if known or not asked else []
    except ElectionRefused as error:
        return _refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{error}: ask another node")
    except Exception as error:  # etcd unreachable or slow: nothing was decided that the caller could not retry
        return _refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"etcd did not answer: {error}")
    answer = admin.ElectLeadersResponse()
    for result in results:
        answer.results.append(
            admin.ElectLeadersResponse.Result(
                coordinator_id=result.coordinator_id, outcome=_OUTCOMES[result.outcome],
                preferred_leader=result.preferred, leader=result.leader, leader_epoch=result.leader_epoch,
                reason=result.reason,
            )
        )  # fmt: skip
    for coordinator_id in unknown:
        answer.results.append(
            admin.ElectLeadersResponse.Result(
                coordinator_id=coordinator_id, outcome=admin.LEADER_ELECTION_NOT_POSSIBLE, preferred_leader=-1,
                leader=-1, leader_epoch=-1, reason=f"no coordinator {coordinator_id}: the cluster has {count}",
            )
        )  # fmt: skip
        answer.results[-1].error_code = ErrorCode.INVALID_REQUEST
    answer.results.sort(key=lambda r: r.coordinator_id)
    return answer
