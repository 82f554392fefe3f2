"""A local Cloud Storage server for the ``gs://`` tests: the ``gcp-storage-emulator`` package (the test extra,
completed by tests/gcs_server.py) on 127.0.0.1, in memory, in a process of its own, with one bucket. gcsfs
reaches it through ``STORAGE_EMULATOR_HOST`` and anonymous credentials (``FSSPEC_GS_TOKEN=anon`` for the
processes a test starts; fsspec's config for this one), TensorStore (orbax's checkpoint arrays) through
``TENSORSTORE_GCS_HTTP_URL`` and a fixed token. gcsfs's probe of each bucket's type over gRPC, which the
emulator does not serve (it waits 60 s before falling back), is off for the whole run (tests/conftest.py)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from gcs_server import DENIED, PRIVATE  # noqa: F401 - the buckets that refuse (for the tests)

BUCKET = "edge-jax-test"
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcs_server.py")  # the emulator, completed


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
def emulator(timeout_s: float = 60.0, port: int = 0, directory: str = ""):
    """Start the server, point this process (and every process it starts) at it, yield ``gs://BUCKET``;
    then stop it and put the environment back. ``directory``: keep the objects on disk there (a server
    started again on the same ``port`` and ``directory`` has them), not in memory."""
    import fsspec.config
    import gcsfs
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    # --quiet and a file for its stderr: it logs every request, and a pipe nobody reads fills after ~64 KB of
    # them and stops the server mid-run (requests then wait forever for an answer)
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, SERVER, "start", "--host=127.0.0.1", f"--port={port}",
                             *([] if directory else ["--in-memory"]), f"--default-bucket={BUCKET}", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True, cwd=directory or None)
    # gcsfs: STORAGE_EMULATOR_HOST; TensorStore (orbax's array writer): its endpoint and a fixed token, so it
    # looks for no Google credentials; HTTP/1.1, which the emulator serves (not HTTP/2)
    env = {"STORAGE_EMULATOR_HOST": url, "FSSPEC_GS_TOKEN": "anon", "TENSORSTORE_GCS_HTTP_URL": url,
           "GOOGLE_AUTH_TOKEN_FOR_TESTING": "anon", "TENSORSTORE_GCS_HTTP_VERSION": "1.1"}
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
        # the bucket this account may only read (tests/gcs_server.py)
        made = urllib.request.Request(f"{url}/storage/v1/b?project=test", method="POST",
                                      data=json.dumps({"name": DENIED}).encode(),
                                      headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(made, timeout=10).close()
        except urllib.error.HTTPError as e:
            if e.code != 409:  # 409: there already (a server started again on its objects)
                raise
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
