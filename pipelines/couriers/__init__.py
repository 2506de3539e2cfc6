"""The couriers pipeline: the same raw order events -> current figures per courier.

transform.py  the Spark side: validation fields (the orders') and the stateful transform
rules.py      the courier rules, vectorised over a micro-batch, on top of the orders rules
reference.py  the same rules one event at a time (the tests' and the demo's oracle)
"""
