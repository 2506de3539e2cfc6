"""What user functions and formats do to values: transform, indexing, ttl, migrate, quarantine."""
