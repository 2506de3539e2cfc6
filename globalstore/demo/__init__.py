"""The end-to-end demo behind `globalstore demo` (not part of the store).

run.py       broker, generated events, one Spark run, two store processes, the checks
instance.py  what each store process does and reports
report.py    the summary and its checks against the expected orders
"""
