"""Spark jobs that turn raw event topics into compacted "current value per key" topics.

A pipeline is a `Pipeline` spec (validation fields + a transform); `skeleton` supplies the
rest: read the raw topic, validate, dead-letter, transform, write in the topic contract.
"""
