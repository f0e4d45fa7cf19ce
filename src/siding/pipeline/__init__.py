"""The Spark side: session, Kafka source, one streaming query per lane, commits."""
