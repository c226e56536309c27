from __future__ import annotations

from collections.abc import Iterator

import pytest
from _s3_server import S3Server, start_s3_server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible server (moto) on 127.0.0.1 for the whole session, with one bucket."""
    pytest.importorskip("s3fs", reason="the s3 tests need s3fs (pip install fabricx[s3])")
    pytest.importorskip("moto.server", reason="the s3 tests need moto[server] (in the dev extra)")
    server = start_s3_server()
    yield server
    server.stop()
