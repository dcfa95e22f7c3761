"""The wire contract (`coordinator.proto`) and the metadata-log records (`records.proto`),
with their generated Python modules (regenerate with `python -m protos.generate`)."""
