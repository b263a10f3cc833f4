"""Example pipelines: `python -m rmqpy.pipeline.examples.tag_counts --help`."""
