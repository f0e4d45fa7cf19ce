"""Code that runs on the Spark driver: the application, each running route, its batch handlers,
stores, drain and commits. It may import the executor and offline packages, never the reverse."""
