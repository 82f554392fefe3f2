"""A local Cloud Storage server for the ``gs://`` tests: the ``gcp-storage-emulator`` package (the test extra)
on 127.0.0.1, in memory, in a process of its own, with one bucket. gcsfs reaches it through
``STORAGE_EMULATOR_HOST`` and anonymous credentials (``FSSPEC_GS_TOKEN=anon`` for the processes a test
starts; fsspec's config for this one); gcsfs's probe of each bucket's type over gRPC, which the emulator does
not serve (it waits 60 s before falling back), is off for the whole run (tests/conftest.py)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BUCKET = "edge-jax-test"
# The emulator's server answers one connection at a time (http.server.HTTPServer); a thread per connection, as
# a real endpoint serves them.
_SERVE = """import http.server, sys
http.server.HTTPServer = http.server.ThreadingHTTPServer
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def emulator(timeout_s: float = 60.0):
    """Start the server, point this process (and every process it starts) at it, yield ``gs://BUCKET``;
    then stop it and put the environment back."""
    import fsspec.config
    import gcsfs
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # --quiet and a file for its stderr: it logs every request, and a pipe nobody reads fills after ~64 KB of
    # them and stops the server mid-run (requests then wait forever for an answer)
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, "start", "--host=127.0.0.1", f"--port={port}",
                             "--in-memory", f"--default-bucket={BUCKET}", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    env = {"STORAGE_EMULATOR_HOST": url, "FSSPEC_GS_TOKEN": "anon"}
    saved_env = {k: os.environ.get(k) for k in env}
    saved_conf = dict(fsspec.config.conf.get("gs", {}))
    try:
        deadline = time.monotonic() + timeout_s
        while not _serving(url):
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the GCS emulator exited ({proc.returncode}): {log.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the GCS emulator did not answer on {url} within {timeout_s:.0f} s")
            time.sleep(0.2)
        os.environ.update(env)
        fsspec.config.conf["gs"] = {**saved_conf, "token": "anon"}
        gcsfs.GCSFileSystem.clear_instance_cache()  # an instance made before would talk to Google
        yield f"gs://{BUCKET}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fsspec.config.conf["gs"] = saved_conf
        gcsfs.GCSFileSystem.clear_instance_cache()
