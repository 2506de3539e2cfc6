"""Snapshots of a store: create, stream, fetch and install, with their manifest."""
