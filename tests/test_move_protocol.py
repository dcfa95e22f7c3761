"""The steps of a partition's move (docs/design.md §5a, `coordinator/topics/move_protocol.py`) in a model.

One partition moves from S to T. Idempotent producers commit through a broker that routes by what
FindCoordinator would answer, or by a stale route; they resend batches already acknowledged. The move worker is
stateless: it asks T where it is (an answer that may be stale when used) and acts, and what it sends T is a
message delivered later, more than once or never. A move may start with its catch-up (commits go on at S while
chunks are sent, until the worker freezes the tail: `catch_up_step`). An operator may cancel at any time. After
every step: the two sides never both take writes, every acknowledged batch is at its offset where the partition is
served, and a resend of an acknowledged batch is a duplicate with the first offset. At the end, with every
message delivered and the worker run to the end, exactly one side serves and holds every acknowledged batch.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.topics.move_protocol import (
    Answer,
    Next,
    SourceStep,
    TargetState,
    TargetStep,
    abandon_answer,
    adopt_answer,
    catch_up_step,
    chunk_answer,
    next_step,
    serving_coordinator,
    source_serves,
    target_serves,
)

SOURCE, TARGET = 0, 1
CHUNK_BATCHES = 2
TAIL_BATCHES = 1  # the catch-up freezes with at most this many batches left to copy
PRODUCERS = 2

Batch = tuple[int, int]  # (producer id, sequence)


class MoveModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.source = SourceStep.SERVING
        self.source_log: list[Batch] = []
        self.target = TargetState(TargetStep.NONE, 0)
        self.staged: list[list[Batch]] = []
        self.target_log: list[Batch] = []
        self.started = False
        self.cancelling = False
        self.known_target = self.target  # the worker's last answer from T
        self.known_next = 0  # with it: where T's staged batches end
        self.in_flight: list[tuple[str, int, list[Batch]]] = []  # messages to T: (kind, chunk index, batches)
        self.acknowledged: dict[Batch, int] = {}
        self.next_sequence = [0] * PRODUCERS

    # ------------------------------------------------------------------ the broker

    def _commit_at(self, coordinator: int, batch: Batch) -> int | None:
        """The coordinator's answer: the batch's offset (new or its duplicate's), or None for NOT_COORDINATOR."""
        if coordinator == SOURCE and source_serves(self.source):
            log = self.source_log
        elif coordinator == TARGET and target_serves(self.target):
            log = self.target_log
        else:
            return None
        if batch in log:
            return log.index(batch)  # a duplicate: the producer's window moved with the partition
        log.append(batch)
        return len(log) - 1

    @rule(producer=st.integers(0, PRODUCERS - 1), stale=st.booleans())
    def commit(self, producer: int, stale: bool) -> None:
        routed = serving_coordinator(SOURCE, TARGET, self.target)
        batch = (producer, self.next_sequence[producer])
        offset = self._commit_at(TARGET - routed if stale else routed, batch)
        if offset is None:
            return  # NOT_COORDINATOR: the producer sends the same batch again later
        assert self.acknowledged.setdefault(batch, offset) == offset, f"{batch} acknowledged at two offsets"
        self.next_sequence[producer] += 1

    @rule(pick=st.integers(0, 99), stale=st.booleans())
    def resend(self, pick: int, stale: bool) -> None:
        if not self.acknowledged:
            return
        batch = sorted(self.acknowledged)[pick % len(self.acknowledged)]
        routed = serving_coordinator(SOURCE, TARGET, self.target)
        offset = self._commit_at(TARGET - routed if stale else routed, batch)
        assert offset is None or offset == self.acknowledged[batch], f"resent {batch} got offset {offset}"

    # ------------------------------------------------------------------ the operator and the move worker

    @rule(catch_up=st.booleans())
    def start_move(self, catch_up: bool) -> None:
        if self.source is SourceStep.SERVING and not self.started:
            self.started = True  # PartitionMoveStarted in S's log, with catch_up or not
            self.source = SourceStep.CATCHING_UP if catch_up else SourceStep.FROZEN

    @rule()
    def cancel(self) -> None:
        self.cancelling = True

    @rule()
    def ask_target(self) -> None:
        self.known_target = self.target
        self.known_next = sum(len(chunk) for chunk in self.staged)

    def _chunks(self) -> int:
        """The move's chunks as the worker counts them from its last answer: those staged, and the rest's."""
        left = len(self.source_log) - self.known_next
        return max(1, self.known_target.staged_chunks + -(-left // CHUNK_BATCHES))

    @rule(stalled=st.booleans())
    def work(self, stalled: bool = False) -> None:
        if self.source is SourceStep.CATCHING_UP:
            left = len(self.source_log) - self.known_next
            step = catch_up_step(self.known_target, left, TAIL_BATCHES, stalled, self.cancelling)
            assert step is not Next.ADOPT, "an adoption while commits go on at the source"
        else:
            step = next_step(self.source, self.known_target, self._chunks(), self.cancelling)
        if step is Next.FREEZE:
            self.source = SourceStep.FROZEN  # PartitionMoveFrozen in S's log
        elif step is Next.SEND_CHUNK:
            index = self.known_target.staged_chunks
            chunk = self.source_log[self.known_next : self.known_next + CHUNK_BATCHES]
            self.in_flight.append(("chunk", index, list(chunk)))
        elif step is Next.ADOPT:
            self.in_flight.append(("adopt", self._chunks(), []))
        elif step is Next.ABANDON:
            self.in_flight.append(("abandon", 0, []))
        elif step is Next.DROP:
            self.source = SourceStep.MOVED_OUT
        elif step is Next.CANCEL:
            self.source = SourceStep.CANCELLED

    @rule(pick=st.integers(0, 99), keep=st.booleans())
    def deliver(self, pick: int, keep: bool) -> None:
        """T takes one message (kept in flight too when `keep`: delivered again later)."""
        if not self.in_flight:
            return
        kind, index, batches = self.in_flight[pick % len(self.in_flight)]
        if not keep:
            self.in_flight.remove((kind, index, batches))
        if kind == "chunk" and chunk_answer(self.target, index) is Answer.RECORD:
            self.staged.append(batches)
            self.target = TargetState(TargetStep.STAGING, len(self.staged))
        elif kind == "adopt" and adopt_answer(self.target, index) is Answer.RECORD:
            self.target_log = [batch for chunk in self.staged for batch in chunk]
            self.target = TargetState(TargetStep.ADOPTED, len(self.staged))
        elif kind == "abandon" and abandon_answer(self.target) is Answer.RECORD:
            self.staged = []
            self.target = TargetState(TargetStep.ABANDONED, 0)

    @rule(pick=st.integers(0, 99))
    def lose(self, pick: int) -> None:
        if self.in_flight:
            del self.in_flight[pick % len(self.in_flight)]

    # ------------------------------------------------------------------ checks

    @invariant()
    def never_both_take_writes(self) -> None:
        assert not (source_serves(self.source) and target_serves(self.target)), (self.source, self.target)

    @invariant()
    def every_acknowledged_batch_stays_at_its_offset(self) -> None:
        assert self.source is not SourceStep.MOVED_OUT or target_serves(self.target), "dropped before adopted"
        log = self.target_log if target_serves(self.target) else self.source_log
        for batch, offset in self.acknowledged.items():
            assert offset < len(log) and log[offset] == batch, f"{batch} not at {offset} in {log}"

    def teardown(self) -> None:
        for _ in range(100):
            self.ask_target()
            self.work()
            while self.in_flight:
                self.deliver(0, keep=False)
        self.ask_target()
        assert self.source is not SourceStep.CATCHING_UP
        assert next_step(self.source, self.target, self._chunks(), self.cancelling) is Next.DONE
        assert source_serves(self.source) != target_serves(self.target)
        self.every_acknowledged_batch_stays_at_its_offset()


MoveModel.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_move_protocol = MoveModel.TestCase


def test_a_frozen_source_moves_on_as_the_target_answers() -> None:
    staged = TargetState(TargetStep.STAGING, 2)
    assert next_step(SourceStep.FROZEN, TargetState(TargetStep.NONE, 0), 3, False) is Next.SEND_CHUNK
    assert next_step(SourceStep.FROZEN, staged, 3, False) is Next.SEND_CHUNK
    assert next_step(SourceStep.FROZEN, TargetState(TargetStep.STAGING, 3), 3, False) is Next.ADOPT
    assert next_step(SourceStep.FROZEN, TargetState(TargetStep.ADOPTED, 3), 3, True) is Next.DROP
    assert next_step(SourceStep.FROZEN, staged, 3, True) is Next.ABANDON
    assert next_step(SourceStep.FROZEN, TargetState(TargetStep.ABANDONED, 0), 3, True) is Next.CANCEL
    assert next_step(SourceStep.CANCELLED, staged, 3, True) is Next.ABANDON


def test_the_target_stages_in_order_and_never_abandons_what_it_adopted() -> None:
    staged = TargetState(TargetStep.STAGING, 2)
    assert [chunk_answer(staged, i) for i in (1, 2, 3)] == [Answer.ALREADY, Answer.RECORD, Answer.REFUSED]
    assert adopt_answer(staged, 3) is Answer.REFUSED and adopt_answer(staged, 2) is Answer.RECORD
    adopted = TargetState(TargetStep.ADOPTED, 2)
    assert adopt_answer(adopted, 2) is Answer.ALREADY and abandon_answer(adopted) is Answer.REFUSED
    assert adopt_answer(TargetState(TargetStep.ABANDONED, 0), 0) is Answer.REFUSED


def test_a_cancel_racing_an_adoption_in_flight_waits_for_the_target() -> None:
    model = MoveModel()
    model.commit(producer=0, stale=False)
    model.start_move(catch_up=False)
    model.work()  # chunk 0 to T
    model.deliver(0, keep=False)
    model.ask_target()
    model.work()  # adopt, in flight
    model.cancel()
    model.work()  # asks T to abandon: S does not cancel on its own
    assert model.source is SourceStep.FROZEN
    model.deliver(0, keep=False)  # T adopts first
    model.deliver(0, keep=False)  # then the abandon: refused
    model.never_both_take_writes()
    model.ask_target()
    model.work()
    assert model.source is SourceStep.MOVED_OUT and target_serves(model.target)
    model.every_acknowledged_batch_stays_at_its_offset()


def test_commits_to_a_frozen_source_are_refused_until_the_target_serves_them() -> None:
    model = MoveModel()
    model.commit(producer=0, stale=False)
    model.start_move(catch_up=False)
    model.commit(producer=0, stale=False)
    assert model.next_sequence[0] == 1, "a frozen source took a commit"
    model.teardown()
    model.commit(producer=0, stale=False)
    model.resend(pick=0, stale=False)
    assert model.next_sequence[0] == 2 and model.target_log == [(0, 0), (0, 1)]


def test_commits_during_the_catch_up_are_copied_and_the_freeze_leaves_only_the_tail() -> None:
    model = MoveModel()
    for _ in range(5):
        model.commit(producer=0, stale=False)
    model.start_move(catch_up=True)
    model.work()  # chunk 0 (offsets 0, 1), while S still takes commits
    model.commit(producer=1, stale=False)
    assert model.next_sequence[1] == 1 and model.source is SourceStep.CATCHING_UP
    model.deliver(0, keep=False)
    model.ask_target()
    model.work()  # 4 left: chunk 1
    model.deliver(0, keep=False)
    model.ask_target()
    model.work()  # 2 left: chunk 2
    model.deliver(0, keep=False)
    model.ask_target()
    model.work()  # 0 left, at most the tail: the freeze
    assert model.source is SourceStep.FROZEN
    model.commit(producer=1, stale=False)
    assert model.next_sequence[1] == 1, "a frozen source took a commit"
    model.teardown()
    assert model.target_log == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0)]
