"""A coordinator's metadata log: segment files of framed, CRC-checked record batches."""
