"""The defaults the pipelines' CLI shows and the jobs use, each defined once, here: the CLI
imports this module without pulling in Spark."""

# Picked by freshness (docs/performance.md, "Pipeline"): 250 ms beat 1 s and back-to-back batches.
TRIGGER_INTERVAL = "250 milliseconds"
# Spark in this process, on every core; ignored under spark-submit, whose --master wins.
LOCAL_MASTER = "local[*]"
# The topic the raw order events arrive on (the orders and couriers jobs read it).
ORDERS_RAW_TOPIC = "orders.raw"
