"""Development kit: the embedded Kafka broker, simulated consumers and producers."""
