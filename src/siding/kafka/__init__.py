"""A thin layer over confluent-kafka: it translates, it decides nothing."""
