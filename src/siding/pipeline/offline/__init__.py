"""Tools that read or move a route's checkpoint while no query runs it: offset moves and their
journal, positions, the checkpoint's owner and the route's lock."""
