"""Where a route's checkpoint lives: the ``Place`` of ``[spark] checkpoint_dir`` and of a route
in it, on the local file system or (any URI but ``file:``) through Hadoop's FileSystem API."""

from __future__ import annotations

from siding import naming
from siding.config import SidingConfig
from siding.pipeline.offline.storage import LOCAL, Place, local_path


def checkpoint_root(config: SidingConfig) -> Place:
    """``[spark] checkpoint_dir`` as a ``Place``."""
    location = config.spark.checkpoint_dir
    folder = local_path(location)
    if folder is not None:
        return Place(LOCAL, str(folder))
    from siding.pipeline.offline.hadoop_fs import storage_for

    spark = config.spark
    return Place(storage_for(location, spark.conf_values(), spark.jars_dir), location)


def route_place(config: SidingConfig, route_name: str) -> Place:
    """The folder of ``route_name``'s checkpoints (its queries' folders and siding's files)."""
    return checkpoint_root(config) / naming.route_checkpoint_subdir(route_name)
