"""The write side: the store thread, its batch sources, topic metadata and progress."""
