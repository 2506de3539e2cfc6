"""Copies of a store: the live copy and its swap, healing, announcements to readers."""
