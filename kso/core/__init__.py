"""kso's domain, the bottom layer every package builds on: quantities, Pod/Node parsing, ClusterState,
settings, the safety maths, snapshots, the API-server cache and binder, the commands' cluster input. The
``kso`` command (kso/cli.py) is on top of all layers; nothing here imports a higher one (tests/test_layers.py)."""
