"""The loan-return worker at a move's target (design §5a): the borrowed WAL files it holds no live batch in go back to
their lenders.

Every `diskless.partition.move.interval.ms`, on the coordinator's leader, it reads at most
`diskless.partition.move.return.files` loan rows with no live batch and no loan of their own out
(`adoptions.loan_rows_to_return`), asks each lender's leader to end the loans (ReturnFiles: FileLoanReturned there),
then records FileReturned here for each one ended (`move_returns.check_file_returned`), which forgets the row (or
keeps an owned one as a chain row). A lender that cannot be asked is tried again after a backoff of its own; a loan
the lender makes wait (a move to this coordinator still frozen there) is asked again next pass. Nothing is kept
between passes: a crash between the lender's record and this one's only makes the next pass ask again, which the
lender answers as success (an unknown loan)."""

from __future__ import annotations

import logging
from collections import defaultdict

from coordinator.base.backoff import Backoff
from coordinator.base.clock import Clock
from coordinator.base.errors import ErrorCode
from coordinator.cluster.peers import PeerClient, PeerError
from coordinator.config.settings import Settings
from coordinator.files.move_returns import check_file_returned
from coordinator.machine.state import adoptions
from coordinator.runtime.shard import CoordinatorShard, Operation
from coordinator.runtime.shard.worker import PeriodicWorker
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal

log = logging.getLogger(__name__)


class LoanReturnWorker(PeriodicWorker):
    task_name = "loan-returns"
    what = "loan returns"

    def __init__(self, shard: CoordinatorShard, settings: Settings, clock: Clock, peers: PeerClient) -> None:
        super().__init__(shard, settings.request_timeout_ms / 1000, clock, settings.partition_move_interval_ms)
        self._settings = settings
        self._peers = peers

        def new_backoff() -> Backoff:
            return Backoff(settings.partition_move_retry_backoff_ms, settings.partition_move_retry_backoff_max_ms)

        self._backoff: dict[int, Backoff] = defaultdict(new_backoff)  # per lender

    async def run_pass(self) -> int:
        """Returns what it can of the loan rows here; the number of rows forgotten (or made chain rows)."""
        if not self.leads():
            return 0
        limit = self._settings.partition_move_return_files
        rows = await self._read(lambda db: adoptions.loan_rows_to_return(db, limit))  # off the loop
        by_lender: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for row in rows:
            by_lender[row.lender].append((row.object_key, row.move_id))
        returned = 0
        for lender, keys in by_lender.items():
            backoff = self._backoff[lender]
            if not backoff.ready(self._clock.now_ms()):
                continue
            try:
                ended = await self._end_loans(lender, keys)
            except (PeerError, TimeoutError) as error:
                wait_ms = backoff.failed(self._clock.now_ms())
                log.warning(
                    "coordinator %d: returning %d files to coordinator %d waits %d ms: %s",
                    self.coordinator_id, len(keys), lender, wait_ms, error,
                )  # fmt: skip
                continue
            backoff.succeeded()
            for object_key in ended:
                answer = await self._submit(Operation(check_file_returned, object_key), "a borrowed file's return")
                if answer.error_code is ErrorCode.NONE:
                    returned += 1
        return returned

    async def _end_loans(self, lender: int, loans: list[tuple[str, int]]) -> list[str]:
        """The keys whose loans the lender ended (now or before)."""
        request = internal.ReturnFilesRequest(
            from_coordinator_id=self.coordinator_id, to_coordinator_id=lender,
            object_keys=[key for key, _ in loans], move_ids=[move_id for _, move_id in loans],
            timeout_ms=int(self._timeout_s * 1000),
        )  # fmt: skip
        answer = await self._peers.return_files(request, self._timeout_s)
        if answer.error_code != pb.NONE:
            raise PeerError(f"coordinator {lender}: {pb.ErrorCode.Name(answer.error_code)}: {answer.error_message}")
        return [file.object_key for file in answer.files if file.error_code == pb.NONE]
