"""The `htam-graph` command line (installed as `htam_graph.cli`)."""
