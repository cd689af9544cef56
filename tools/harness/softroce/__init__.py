"""softroce: run a command where a real RDMA device exists (tools/softroce; see cli.py)."""
