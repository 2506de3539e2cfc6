"""The couriers pipeline: the same raw order events -> current figures per courier.

transform.py  the Spark side: the stateful transform, over pipelines/order_events' raw side
rules.py      the courier rules, vectorised over a micro-batch, on top of the lifecycle rules
reference.py  the same rules one event at a time (the tests' and the demo's oracle)
"""
