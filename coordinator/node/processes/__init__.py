"""A node spread over processes, one event loop and interpreter per core (DESIGN §2)."""
