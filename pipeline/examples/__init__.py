"""Example pipelines: `python -m pipeline.examples.tag_counts --help`."""
