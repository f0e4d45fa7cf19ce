"""Code that runs in Spark's Python workers: a task's delivery of its slice, the worker's event
loop, parked calls and in-flight reports, and the task's result type. It never imports driver
code."""
