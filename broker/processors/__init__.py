"""One module per request family; each exposes processors keyed by request code."""
