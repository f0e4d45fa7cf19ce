"""The routes a command may name: those of the config file, and those made through the control
API that the registry topic keeps (docs/registration.md)."""

from __future__ import annotations

from siding.config import SidingConfig
from siding.errors import SidingError


def with_api_route(config: SidingConfig, route: str) -> SidingConfig:
    """The config, plus ``route`` when it is not in the file but was made through the control
    API and is in the registry topic (docs/registration.md)."""
    from siding.kafka.reader import read_to_end
    from siding.registry.records import api_route

    if any(r.name == route for r in config.route) or not config.control.takes_routes:
        return config
    try:
        records = read_to_end(config.kafka.client_config(), config.control.registry_topic)
    except SidingError:
        return config  # no registry: the error says the route is not in the file
    found = api_route(records, route, config.route, config.kafka.names)
    if found is None:
        return config
    return config.model_copy(update={"route": (*config.route, found)})
