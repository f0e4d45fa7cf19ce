"""DLQ tools: Spark batch jobs over bounded offset ranges of a dead-letter topic."""
