"""A real S3-compatible server (moto's server mode) on loopback, for checkpoint storage tests.

The server speaks the S3 HTTP protocol on 127.0.0.1; s3fs talks to it as to any S3 endpoint, so the
tests exercise the real client stack (s3fs, aiobotocore, HTTP), not a mock of fsspec.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Any

#: Dummy credentials: moto accepts any, s3fs needs some.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "fabricx-test",
    "AWS_SECRET_ACCESS_KEY": "fabricx-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    """A running loopback S3 server with one bucket; :meth:`url` gives a fresh prefix per test."""

    endpoint_url: str
    bucket: str
    _server: Any = field(repr=False)
    _counter: Any = field(default_factory=itertools.count, repr=False)

    @property
    def storage_options(self) -> dict[str, Any]:
        """What ``FsspecCheckpointIO(storage_options=...)`` needs to reach this server."""
        return {"endpoint_url": self.endpoint_url, "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "skip_instance_cache": True}

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point a child process's s3fs at this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": self.endpoint_url, "AWS_ENDPOINT_URL": self.endpoint_url}

    def url(self, name: str = "t") -> str:
        """A fresh, empty prefix ``s3://<bucket>/<name>-<n>``."""
        return f"s3://{self.bucket}/{name}-{next(self._counter)}"

    def stop(self) -> None:
        self._server.stop()


def start_s3_server(bucket: str = "fabricx-ckpt") -> S3Server:
    """Start moto's threaded server on a free loopback port and create ``bucket``."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    for key, value in CREDENTIALS.items():
        os.environ.setdefault(key, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3Server(endpoint_url=f"http://{host}:{port}", bucket=bucket, _server=server)
    import fsspec

    fs = fsspec.filesystem("s3", **s3.storage_options)
    fs.mkdir(f"s3://{bucket}")
    return s3
