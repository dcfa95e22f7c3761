"""A classic topic's partitions switched to diskless (DESIGN §4d, Inkless's InitDisklessLog): rules and RPCs."""
