"""The ``siding`` command line; one module per command group."""
