"""Routing rules shared by every client of the coordinators: addresses, routes, which replica serves what.

Pure: no sockets. The asyncio routing client (`coordinator.client.routing_client`) and the orphan scan's
discovery (`spark.coordinator_client`) both read endpoints through these rules (DESIGN §6a
"Routing", "Reads off the leader").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import final

from coordinator.client.request_parts import PartitionKey
from coordinator.edge.rpcs import ServedBy
from protos import coordinator_pb2 as pb

# Per-item answers that mean "ask again where the coordinator is now": refresh the route, retry the item.
RETRIABLE_CODES = frozenset(
    {pb.NOT_COORDINATOR, pb.NOT_LEADER_OR_FOLLOWER, pb.COORDINATOR_NOT_AVAILABLE, pb.COORDINATOR_LOAD_IN_PROGRESS}
)
# A node listening on every interface reports this host: the caller reaches it as it reached the node that answered.
UNSPECIFIED_HOSTS = frozenset({"", "0.0.0.0", "::"})
PORT_MAX = 65535
# A reader process that could not be reached is skipped for this long; its replica's own address serves meanwhile.
READER_RETRY_S = 1.0


def target(host: str, port: int) -> str:
    """HOST:PORT as gRPC wants it (an IPv6 host in brackets)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT; raises ValueError saying what is wrong."""
    host, separator, port_text = address.strip().rpartition(":")
    if not separator or not host.strip("[]") or not port_text.isdigit() or not 0 < int(port_text) <= PORT_MAX:
        raise ValueError(f"bootstrap address {address!r} is not HOST:PORT with a port 1..{PORT_MAX}")
    return host.strip("[]"), int(port_text)


def parse_bootstrap(addresses: str | Iterable[str]) -> tuple[str, ...]:
    """The bootstrap addresses of `HOST:PORT[,HOST:PORT…]` (or a list), normalised; at least one."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    parsed = tuple(target(*parse_address(item)) for item in items if item.strip())
    if not parsed:
        raise ValueError("no bootstrap address given (HOST:PORT[,HOST:PORT…])")
    return tuple(dict.fromkeys(parsed))


def endpoint_address(host: str, port: int, via_address: str) -> str:
    """Where to reach a reported endpoint; an unspecified host is the host of the node that reported it."""
    if host in UNSPECIFIED_HOSTS:
        host = parse_address(via_address)[0]
    return target(host, port)


def endpoint_problem(endpoint: pb.CoordinatorEndpoint) -> str | None:
    """Why an endpoint names no leader to send to, or None."""
    if endpoint.leader_node_id < 0 or endpoint.port <= 0:
        return f"coordinator {endpoint.coordinator_id} has no leader"
    return None


@final
@dataclass(frozen=True, slots=True)
class ReplicaRoute:
    node_id: int
    address: str
    in_sync: bool
    read_addresses: tuple[str, ...] = ()  # the replica's reader processes (FindBatches only)


@final
@dataclass(frozen=True, slots=True)
class CoordinatorRoute:
    """Where one coordinator is served: its leader (None while it has none) and every replica."""

    coordinator_id: int
    leader_node_id: int
    leader_epoch: int
    leader_address: str | None
    replicas: tuple[ReplicaRoute, ...]

    def address_for(self, access: ServedBy, preferred_node_id: int | None = None) -> str | None:
        """The address that serves `access` (LEADER or REPLICA, as a method's row says); a read goes to the preferred
        node when it holds a replica."""
        if access is ServedBy.REPLICA and preferred_node_id is not None:
            for replica in self.replicas:
                if replica.node_id == preferred_node_id:
                    return replica.address
        if self.leader_address is not None or access is ServedBy.LEADER:
            return self.leader_address
        # No leader: an in-sync replica still serves reads up to its high watermark.
        return next((r.address for r in self.replicas if r.in_sync), None)

    @property
    def addresses(self) -> frozenset[str]:
        leader = () if self.leader_address is None else (self.leader_address,)
        return frozenset((*leader, *(r.address for r in self.replicas)))


def read_addresses_of(replica: pb.ReplicaEndpoint, replica_address: str) -> tuple[str, ...]:
    """A replica's reader addresses, resolved as its own address was; malformed ones are left out."""
    resolved = []
    for address in replica.read_addresses:
        try:
            host, port = parse_address(address)
        except ValueError:
            continue
        resolved.append(endpoint_address(host, port, replica_address))
    return tuple(resolved)


def route_of(endpoint: pb.CoordinatorEndpoint, via_address: str) -> CoordinatorRoute:
    """The route an endpoint describes, its addresses resolved as seen from `via_address`."""
    leader = None if endpoint_problem(endpoint) else endpoint_address(endpoint.host, endpoint.port, via_address)
    replicas = []
    for r in endpoint.replicas:
        address = endpoint_address(r.host, r.port, via_address)
        replicas.append(ReplicaRoute(r.node_id, address, r.in_sync, read_addresses_of(r, address)))
    return CoordinatorRoute(
        endpoint.coordinator_id, endpoint.leader_node_id, endpoint.leader_epoch, leader, tuple(replicas)
    )


def newer(cached: CoordinatorRoute | None, learned: CoordinatorRoute) -> bool:
    """Whether `learned` replaces `cached`: a route never goes back to an older leader epoch (as Kafka's metadata)."""
    if cached is None or cached.leader_address is None:
        return True
    return learned.leader_address is not None and learned.leader_epoch >= cached.leader_epoch


def only_address(routes: Sequence[CoordinatorRoute]) -> str | None:
    """The one address serving every route (a node without a cluster), or None."""
    addresses = {a for route in routes for a in route.addresses}
    if len(addresses) != 1 or any(route.leader_address is None for route in routes):
        return None
    return next(iter(addresses))


@final
class RoutingTable:
    """What a client knows of the cluster: partition -> coordinator id, and coordinator id -> route.

    A route never goes back to an older leader epoch; one a call found wrong is forgotten and asked again.
    """

    def __init__(self, read_node_id: int | None = None) -> None:
        self.read_node_id = read_node_id  # the replica reads prefer, None: the leader
        self.partitions: dict[PartitionKey, int] = {}
        self.routes: dict[int, CoordinatorRoute] = {}
        self.coordinators_known = False  # every coordinator's route, from DescribeCoordinators
        self.single_address: str | None = None  # set while every route is one address (a node alone)
        self.readers = ReaderRotation()

    def address_of(self, key: PartitionKey, access: ServedBy) -> str | None:
        coordinator_id = self.partitions.get(key)
        route = None if coordinator_id is None else self.routes.get(coordinator_id)
        return None if route is None else route.address_for(access, self.read_node_id)

    def cover(self) -> list[str] | None:
        """One read address per coordinator, deduplicated; None if a coordinator has none."""
        addresses = [route.address_for(ServedBy.REPLICA, self.read_node_id) for route in self.routes.values()]
        if not addresses or any(a is None for a in addresses):
            self.coordinators_known = False
            return None
        return sorted({a for a in addresses if a is not None})

    def addresses(self) -> list[str]:
        """Every node a route names."""
        return sorted({a for route in self.routes.values() for a in route.addresses})

    def learn_found(self, found: pb.FindCoordinatorResponse, via_address: str) -> None:
        for topic in found.topics:
            for partition in topic.partitions:
                if partition.error_code == pb.NONE and partition.coordinator_id >= 0:
                    self.partitions[(topic.topic_id, partition.partition)] = partition.coordinator_id
        self.learn_routes([route_of(e, via_address) for e in found.coordinators])

    def learn_described(self, described: pb.DescribeCoordinatorsResponse, via_address: str) -> None:
        routes = [route_of(d.leader, via_address) for d in described.coordinators if d.HasField("leader")]
        self.learn_routes(routes)
        every = {d.coordinator_id for d in described.coordinators}
        self.coordinators_known = bool(every) and every <= set(self.routes)

    def learn_routes(self, routes: Iterable[CoordinatorRoute]) -> None:
        for route in routes:
            if newer(self.routes.get(route.coordinator_id), route):
                self.routes[route.coordinator_id] = route
                for replica in route.replicas:
                    self.readers.learn(replica.address, replica.read_addresses)
        self.single_address = only_address(list(self.routes.values()))

    def forget_coordinator_of(self, key: PartitionKey) -> None:
        """The coordinator moved or is not ready: its route is asked again (any epoch is then accepted)."""
        coordinator_id = self.partitions.get(key)
        if coordinator_id is not None and self.routes.pop(coordinator_id, None) is not None:
            self.single_address = None
            self.coordinators_known = False

    def forget_address(self, address: str) -> None:
        """A node did not answer: every route through it is asked again."""
        for coordinator_id in [c for c, r in self.routes.items() if address in r.addresses]:
            del self.routes[coordinator_id]
        self.single_address = None
        self.coordinators_known = False


@final
class ReaderRotation:
    """Where a replica's FindBatches go: its reader processes in turn, skipping one that was just unreachable.

    Pure: the caller passes the time. With no reader reachable a read goes to the replica's own address.
    """

    def __init__(self) -> None:
        self._readers: dict[str, tuple[str, ...]] = {}  # replica address -> its readers' addresses
        self._skipped_until: dict[str, float] = {}  # reader address -> monotonic time
        self._turn = 0

    def learn(self, replica_address: str, read_addresses: tuple[str, ...]) -> None:
        self._readers[replica_address] = read_addresses

    def pick(self, replica_address: str, now: float) -> str | None:
        """A reader of the replica to send a read to, or None: send it to the replica's own address."""
        readers = self._readers.get(replica_address, ())
        for _ in range(len(readers)):
            self._turn += 1
            reader = readers[self._turn % len(readers)]
            if self._skipped_until.get(reader, 0.0) <= now:
                return reader
        return None

    def regroup(self, groups: dict[str, list[int]], now: float) -> dict[str, list[int]]:
        """Moves the groups of replicas with a reachable reader out of `groups`, one group per reader: replicas
        sharing readers (a node's commit processes, one reader set) get one call, not one each."""
        by_reader: dict[str, list[int]] = {}
        for address in list(groups):
            reader = self.pick(address, now)
            if reader is not None:
                by_reader.setdefault(reader, []).extend(groups.pop(address))
        return {reader: sorted(indices) for reader, indices in by_reader.items()}

    def unreachable(self, reader_address: str, now: float) -> None:
        self._skipped_until[reader_address] = now + READER_RETRY_S
