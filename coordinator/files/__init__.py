"""WAL files (DESIGN §5): their ownership rules (`ownership`), hand-over between coordinators (`handover`),
DescribeFiles, ListFileKeys, the background workers that hand over and delete (`workers`), and the object store
(`object_store`).
"""
