"""What every job over the raw order events shares (the orders and the couriers jobs):

lifecycle.py   the rules that decide when an order is active and when it ended (pandas)
raw.py         the raw events in Spark: validation, pipeline shape, state step
bucket.py      a bucket's state row (Arrow) and its step, converting only the batch's orders
"""
