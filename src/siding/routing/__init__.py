"""Where records go after dispatch: retry lanes and the DLQ, written durably before a batch ends."""
