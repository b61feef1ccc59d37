# Stub for lz4 4.4.5 (python-lz4), lz4.frame: only the names tests/store/clickhouse uses.

def decompress(
    data: bytes, return_bytearray: bool = False, return_bytes_read: bool = False
) -> bytes: ...
