"""The orders pipeline: raw courier events -> one current value per active order.

transform.py  the Spark side: the stateful transform in buckets of orders (ORDERS); the
              validation and the lifecycle rules are pipelines/order_events', shared
reference.py  the same rules written a second time, one event at a time (the tests' oracle)
generator.py  a realistic raw event stream with out-of-order, duplicate and broken records
"""
