"""The replicated state machine, no sockets: the view and its records, producers, the topic catalog, topic names
and object keys, one module per record kind (`kinds`) with its view and SQLite effects, and the SQLite state
(`state`). What replay touches, and nothing else.
"""
