"""The Diskless coordinator: the metadata service of Kafka's diskless topics (KIP-1164)."""

__version__ = "0.1.0"
