"""The node's settings: their names, defaults and units (`settings`), loading from file, environment and flags
(`loading`), and the rules between them (`rules`).
"""
