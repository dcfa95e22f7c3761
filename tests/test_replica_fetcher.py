"""Replication per node pair (issue #37): a follower node fetches every coordinator it follows on one leader node
in one FetchLogs call, through the node's replica fetcher, on the simulated cluster (tests/simulation/)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from coordinator.machine.topic_names import coordinator_for_new_partition
from coordinator.node.gauges import fetcher_gauges
from protos import coordinator_pb2 as pb
from protos import internal_pb2 as internal
from tests.harness import batch
from tests.simulation.cluster import SimCluster, SimNode
from tests.simulation.workload import TOPIC_ID
from tests.test_simulation import _until, simulate

COORDINATORS = 6  # two led by each of the three nodes: a leader node has several coordinators to send at once
PARTITIONS = 24
WAIT_MS = 500  # the default replica.fetch.wait.max.ms


async def _topic(sim: SimCluster) -> None:
    node = sim.running()[0].node
    assert node is not None
    topic = pb.CreatePartitionsRequest.Topic(topic_id=TOPIC_ID, name="orders", num_partitions=PARTITIONS)
    answer = await node.router.create_partitions(pb.CreatePartitionsRequest(topics=[topic], timeout_ms=5000))
    assert answer.topics[0].error_code == pb.NONE, answer
    await asyncio.sleep(1)


def _partition_of(coordinator_id: int) -> int:
    return next(
        p for p in range(PARTITIONS) if coordinator_for_new_partition(TOPIC_ID, p, COORDINATORS) == coordinator_id
    )


def _leader(sim: SimCluster, coordinator_id: int) -> SimNode:
    (leader,) = sim.leaders(coordinator_id)
    return leader


async def _commit(sim: SimCluster, coordinator_id: int, key: str) -> int:
    node = _leader(sim, coordinator_id).node
    assert node is not None
    request = pb.CommitFileRequest(
        object_key=key, object_format=1, file_size=100, uploader_broker_id=1, owner_ids=[coordinator_id],
        batches=[batch(TOPIC_ID, _partition_of(coordinator_id))], timeout_ms=3000,
    )  # fmt: skip
    result = (await node.router.commit_file(request)).batches[0]
    assert result.error_code == pb.NONE, result
    return result.assigned_base_offset


def _log_end(sim_node: SimNode, coordinator_id: int) -> int:
    return sim_node.shard(coordinator_id).statistics().log_end_offset


def _replicated(sim: SimCluster) -> bool:
    return all(len({_log_end(n, c) for n in sim.running()}) == 1 for c in range(COORDINATORS))


def _fetch_request(sim: SimCluster, follower: SimNode, coordinators: list[int]) -> internal.FetchLogsRequest:
    """What the follower node would send now for `coordinators`: each from its own log end."""
    partitions = []
    for coordinator_id in coordinators:
        role = follower.shard(coordinator_id).role
        assert role is not None
        partitions.append(
            internal.FetchLogRequest(
                coordinator_id=coordinator_id,
                leader_epoch=role.leader_epoch,
                fetch_offset=_log_end(follower, coordinator_id),
                last_fetched_epoch=role.leader_epoch,
                max_bytes=1 << 20,
            )
        )
    role = follower.shard(coordinators[0]).role
    assert role is not None
    return internal.FetchLogsRequest(
        replica_node_id=follower.node_id, replica_incarnation=role.node_incarnation, max_wait_ms=WAIT_MS,
        max_bytes=1 << 20, partitions=partitions,
    )  # fmt: skip


def test_followers_replicate_through_one_call_per_leader_node_and_never_call_fetch_log(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        fetch_log_calls: list[int] = []
        await sim.start_all()
        for sim_node in sim.running():
            assert sim_node.node is not None

            async def refused(request: internal.FetchLogRequest) -> internal.FetchLogResponse:
                fetch_log_calls.append(request.coordinator_id)
                raise AssertionError("FetchLog called")

            sim_node.node.router.fetch_log = refused  # type: ignore[method-assign]
        await _topic(sim)
        for round_ in range(3):
            for coordinator_id in range(COORDINATORS):
                await _commit(sim, coordinator_id, f"wal/pairs/{round_}/{coordinator_id}")
        await _until("every replica holds every leader's log", lambda: _replicated(sim))
        assert fetch_log_calls == []
        for sim_node in sim.running():
            assert sim_node.node is not None and sim_node.node.replica_fetcher is not None
            followed = [c for c in range(COORDINATORS) if not sim_node.shard(c).leads]
            statistics = sim_node.node.replica_fetcher.statistics()
            assert statistics.members == len(followed), statistics
            assert statistics.sessions == len({_leader(sim, c).node_id for c in followed}), statistics
            # Each call carries more than one coordinator: a leader node leads two of them.
            assert statistics.partitions_fetched > statistics.calls > 0, statistics
            gauges = {name: value for name, _, _, _, value in fetcher_gauges(sim_node.node)}
            assert gauges["diskless_replica_fetcher_members"] == statistics.members
            assert gauges["diskless_replica_fetcher_calls"] == statistics.calls > 0

    simulate(tmp_path, 31, work, coordinators=COORDINATORS)


def test_fetch_logs_answers_each_coordinator_by_its_own_rules(tmp_path: Path) -> None:
    """One partition fetches, one is fenced (a stale epoch), one is not led here: each gets its own answer, in the
    request's order, and the fenced one does not stop the others."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        led = [c for c in range(COORDINATORS) if leader.shard(c).leads]
        elsewhere = next(c for c in range(COORDINATORS) if c not in led)
        follower = next(n for n in sim.running() if n is not leader)
        await _commit(sim, led[0], "wal/rules/0")
        await _until("replicated", lambda: _replicated(sim))
        request = _fetch_request(sim, follower, [led[0], led[1], elsewhere])
        request.partitions[1].leader_epoch -= 1
        request.max_wait_ms = 0
        assert leader.node is not None
        answer = await leader.node.router.fetch_logs(request)
        assert [p.coordinator_id for p in answer.partitions] == [led[0], led[1], elsewhere]
        assert [p.error_code for p in answer.partitions] == [pb.NONE, pb.FENCED_LEADER_EPOCH, pb.NOT_LEADER_OR_FOLLOWER]
        assert answer.partitions[0].high_watermark == _log_end(leader, led[0])

    simulate(tmp_path, 32, work, coordinators=COORDINATORS)


def test_fetch_logs_waits_for_any_coordinator_and_bounds_the_answers_frames(tmp_path: Path) -> None:
    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        first, second = [c for c in range(COORDINATORS) if leader.shard(c).leads][:2]
        follower = next(n for n in sim.running() if n is not leader)
        await _until("replicated", lambda: _replicated(sim))
        assert leader.node is not None
        loop = asyncio.get_running_loop()

        # Nothing new anywhere: the call is held for the whole wait.
        started = loop.time()
        answer = await leader.node.router.fetch_logs(_fetch_request(sim, follower, [first, second]))
        assert loop.time() - started >= WAIT_MS / 1000 * 0.9
        assert [p.frames for p in answer.partitions] == [b"", b""]

        # A commit on the second coordinator ends the wait at once, with its frames.
        request = _fetch_request(sim, follower, [first, second])
        started = loop.time()
        call = asyncio.ensure_future(leader.node.router.fetch_logs(request))
        await asyncio.sleep(0.05)
        await _commit(sim, second, "wal/wait/0")
        answer = await call
        assert loop.time() - started < WAIT_MS / 1000 * 0.9
        assert answer.partitions[1].frames and not answer.partitions[0].frames

        # Both have frames to send, but the answer's bound is spent on the first: the second gets its high
        # watermark and log end, and its frames on the next call.
        await _commit(sim, first, "wal/bound/0")
        request = _fetch_request(sim, follower, [first, second])
        for partition in request.partitions:
            partition.fetch_offset, partition.last_fetched_epoch = 0, -1
        request.max_bytes = 1
        answer = await leader.node.router.fetch_logs(request)
        assert [p.error_code for p in answer.partitions] == [pb.NONE, pb.NONE]
        assert answer.partitions[0].frames and not answer.partitions[1].frames
        assert answer.partitions[1].log_end_offset == _log_end(leader, second) > 0

    simulate(tmp_path, 33, work, coordinators=COORDINATORS)


def test_followers_of_a_node_without_fetch_logs_fetch_alone_with_fetch_log(tmp_path: Path) -> None:
    """A rolling upgrade: a leader node of an earlier version answers FetchLogs UNIMPLEMENTED; its followers
    replicate with FetchLog, one coordinator per call, and commits are acknowledged (min.insync.replicas 2)."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        fetch_log_calls: list[int] = []
        for sim_node in sim.running():
            node = sim_node.node
            assert node is not None

            async def unimplemented(request: internal.FetchLogsRequest) -> internal.FetchLogsResponse:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(), "no FetchLogs"
                )

            def counted(fetch_log: object) -> object:
                async def fetch(request: internal.FetchLogRequest) -> internal.FetchLogResponse:
                    fetch_log_calls.append(request.coordinator_id)
                    return await fetch_log(request)  # type: ignore[operator, no-any-return]

                return fetch

            node.router.fetch_logs = unimplemented  # type: ignore[method-assign]
            node.router.fetch_log = counted(node.router.fetch_log)  # type: ignore[method-assign]
        await _topic(sim)
        for coordinator_id in range(COORDINATORS):
            await _commit(sim, coordinator_id, f"wal/alone/{coordinator_id}")
        await _until("every replica holds every leader's log", lambda: _replicated(sim))
        assert set(fetch_log_calls) == set(range(COORDINATORS))

    simulate(tmp_path, 34, work, coordinators=COORDINATORS)


def _methods_called(sim: SimCluster, refuse: str | None = None) -> list[str]:
    """Every internal call's method on the network from now on, in order; `refuse`: a method every node answers
    UNIMPLEMENTED (a node of an earlier version)."""
    called: list[str] = []
    call = sim.network.call

    async def counted(source: str, target: str, method: str, request: object, timeout_s: float | None) -> object:
        called.append(method)
        if method == refuse:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(), method)
        return await call(source, target, method, request, timeout_s)

    sim.network.call = counted  # type: ignore[method-assign]
    return called


def test_followers_fetch_over_the_stream_by_default(tmp_path: Path) -> None:
    """With replica.fetch.stream.enable (the default) every round of a follower node goes over FetchLogsStream: no
    FetchLogs call at all, and commits are acknowledged (min.insync.replicas 2)."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        called = _methods_called(sim)
        await _topic(sim)
        for coordinator_id in range(COORDINATORS):
            await _commit(sim, coordinator_id, f"wal/streamed/{coordinator_id}")
        await _until("every replica holds every leader's log", lambda: _replicated(sim))
        assert "FetchLogsStream" in called
        assert "FetchLogs" not in called and "FetchLog" not in called

    simulate(tmp_path, 35, work, coordinators=COORDINATORS)


def test_followers_of_a_node_without_the_stream_fetch_with_fetch_logs(tmp_path: Path) -> None:
    """A rolling upgrade: a leader node of an earlier version answers FetchLogsStream UNIMPLEMENTED; its followers
    go on with FetchLogs calls (all coordinators at once, never FetchLog alone) and commits are acknowledged."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        called = _methods_called(sim, refuse="FetchLogsStream")
        await _topic(sim)
        for coordinator_id in range(COORDINATORS):
            await _commit(sim, coordinator_id, f"wal/unary/{coordinator_id}")
        await _until("every replica holds every leader's log", lambda: _replicated(sim))
        assert "FetchLogs" in called and "FetchLog" not in called
        # Each session asked the stream once, then calls only.
        assert called.count("FetchLogsStream") <= 2 * len(sim.running())

    simulate(tmp_path, 36, work, coordinators=COORDINATORS)


LINGER_MS = 100  # replica.fetch.linger.ms in the next test: long enough to tell a linger from none


def test_fetch_logs_lingers_for_writes_begun_before_answering_within_its_bound(tmp_path: Path) -> None:
    """An answer with frames for one coordinator waits for the write another coordinator's leader had begun (the
    same append tick's), ends as soon as that write ends, and never waits longer than replica.fetch.linger.ms."""

    async def work(sim: SimCluster) -> None:
        await sim.start_all()
        await _topic(sim)
        leader = _leader(sim, 0)
        first, second = [c for c in range(COORDINATORS) if leader.shard(c).leads][:2]
        follower = next(n for n in sim.running() if n is not leader)
        await _until("replicated", lambda: _replicated(sim))
        assert leader.node is not None
        replication = leader.shard(second).replication_leader()
        assert not isinstance(replication, str), replication
        # Every write the pipelines began so far has ended (appended): nothing holds an answer.
        assert replication.writes_begun > 0 and replication.wrote_through(replication.writes_begun)
        loop = asyncio.get_running_loop()

        # Each request is taken before its commit: the follower node's own fetch may get the frames first.
        request = _fetch_request(sim, follower, [first, second])
        await _commit(sim, first, "wal/linger/0")
        started = loop.time()
        answer = await leader.node.router.fetch_logs(request)
        assert loop.time() - started < LINGER_MS / 1000 / 2  # nothing begun on the second: answered at once
        assert answer.partitions[0].frames

        # A write begun on the second and never ended: the answer waits for it, up to the bound.
        request = _fetch_request(sim, follower, [first, second])
        await _commit(sim, first, "wal/linger/1")
        replication.writing()
        started = loop.time()
        answer = await leader.node.router.fetch_logs(request)
        assert LINGER_MS / 1000 <= loop.time() - started < WAIT_MS / 1000 / 2
        assert answer.partitions[0].frames
        replication.write_failed()

        # A write begun that ends (here: fails) 20 ms later: the answer goes then, not at the bound.
        request = _fetch_request(sim, follower, [first, second])
        await _commit(sim, first, "wal/linger/2")
        replication.writing()
        loop.call_later(0.02, replication.write_failed)
        started = loop.time()
        answer = await leader.node.router.fetch_logs(request)
        assert 0.019 <= loop.time() - started < LINGER_MS / 1000 / 2
        assert answer.partitions[0].frames

    settings = {"diskless.coordinator.replica.fetch.linger.ms": str(LINGER_MS)}
    simulate(tmp_path, 35, work, coordinators=COORDINATORS, settings=settings)
