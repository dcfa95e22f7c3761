"""How close the produce-gateway rule comes to the fewest leader nodes per broker (issue #31), over random clusters.

For each broker, the leader nodes its coordinators span can be no fewer than ⌈its coordinators / the largest leader
group⌉, whatever the assignment; the rule's total over every broker is compared with the total of those bounds
(a ratio of 1.0 would be the bound met everywhere; the true optimum under the balance rule lies in between).
`python -m bench.gateway_placement [--clusters N] [--seed S]`.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter

from coordinator.reads.produce_gateways import Broker, produce_gateways

RACKS = ("", "a", "b", "c")


def compare(clusters: int, seed: int) -> tuple[int, int, int]:
    """(spans summed, lower bounds summed, brokers above their bound) over `clusters` random clusters."""
    chooser = random.Random(seed)
    spans = bounds = above = 0
    for _ in range(clusters):
        brokers = [Broker(b, chooser.choice(RACKS)) for b in range(chooser.randint(1, 120))]
        leaders = {c: chooser.randint(0, 5) for c in range(chooser.randint(1, 40))}
        largest = max(Counter(leaders.values()).values())
        served: dict[tuple[str, int], set[int]] = {}
        for gateway in produce_gateways(brokers, leaders):
            for broker_id in gateway.broker_ids:
                served.setdefault((gateway.rack, broker_id), set()).add(gateway.coordinator_id)
        for coordinators in served.values():
            span = len({leaders[c] for c in coordinators})
            bound = math.ceil(len(coordinators) / largest)
            spans, bounds, above = spans + span, bounds + bound, above + (span > bound)
    return spans, bounds, above


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    spans, bounds, above = compare(args.clusters, args.seed)
    print(f"{args.clusters} random clusters (seed {args.seed}): leader nodes per broker summed {spans:,} against the "
          f"lower bound {bounds:,}: {spans / bounds:.4f}; brokers above their bound: {above:,}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
