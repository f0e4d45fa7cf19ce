"""Python SDK for consumer services: serve deliveries over gRPC, verify webhooks."""
