"""Kafka client settings and clients (librdkafka's names), shared with the pipelines."""
