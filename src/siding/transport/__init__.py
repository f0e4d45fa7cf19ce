"""Transports push one delivery to a consumer service and map its answer to an ``Outcome``."""
