# Stub for lz4 4.4.5 (python-lz4): only what tests/store/clickhouse uses (lz4.frame).
