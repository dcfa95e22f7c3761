"""The gRPC edge: admission and the call gate (`gate`), the edge's own loop (`loop`), access control and the ACL
file, TLS.
"""
