"""A cluster of coordinator nodes (DESIGN §6a): membership, leadership and ISR held in etcd."""
