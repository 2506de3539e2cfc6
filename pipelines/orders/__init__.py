"""The orders pipeline: raw courier events -> one current value per active order.

transform.py  the Spark side: validation fields and the stateful transform (ORDERS)
rules.py      the lifecycle rules, vectorised over a micro-batch
reference.py  the same rules written a second time, one event at a time (the tests' oracle)
generator.py  a realistic raw event stream with out-of-order, duplicate and broken records
"""
