"""The Spark side, placed by where code runs: ``driver`` (the application and its routes),
``executor`` (Spark's Python workers) and ``offline`` (checkpoint tools)."""
