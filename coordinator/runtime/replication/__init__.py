"""Replication of one coordinator's metadata log (DESIGN §6a): the leader's side and the follower's."""
