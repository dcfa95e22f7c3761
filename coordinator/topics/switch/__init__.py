"""A classic topic's partitions switched to diskless (design §4d, Inkless's InitDisklessLog): rules and RPCs."""
