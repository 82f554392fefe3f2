"""The local Cloud Storage server of the ``gs://`` tests (tests/gcs.py starts it: ``python gcs_server.py start
--host ... --port ...``): the ``gcp-storage-emulator`` package with what its handlers lack of the real service's
object API, which the clients under test rely on.

- A thread per connection (the package's server answers one at a time) and room for many connections
  waiting to be accepted, as a real endpoint serves them.
- Object generations on reads: a media download carries ``x-goog-generation`` (TensorStore, orbax's array
  writer, reads it on every read and refuses an answer without it).
- Two buckets that answer as the service does to an account without rights: ``edge-jax-private`` refuses
  every request without credentials (401, the anonymous caller's answer), ``edge-jax-denied`` lets objects be
  read and listed but refuses writes and deletes (403), as a bucket this account may only view.
- Preconditions: ``ifGenerationMatch`` on uploads and deletes (``0``: only when no object has the name),
  ``ifGenerationNotMatch`` on reads, answered 412 / 304 as the service does. TensorStore's conditional writes
  and the grid's object locks depend on them. Checking and writing are one step under a lock, so two
  clients racing for one name get one success and one 412.
"""
from __future__ import annotations

import functools
import http.server
import sys
import threading
from http import HTTPStatus

_ONE = threading.Lock()


def _name(request) -> str | None:
    if "object_id" in request.params:
        return request.params["object_id"]
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data if isinstance(request.data, dict) else {}
    return (data.get("meta") or {}).get("name")


def _generation(storage, request) -> str:
    """The live generation of the request's object, "0" when there is none."""
    from gcp_storage_emulator.exceptions import NotFound
    try:
        return str(storage.get_file_obj(request.params["bucket_name"], _name(request))["generation"])
    except (NotFound, KeyError, TypeError):
        return "0"


def _conditional(handler, reading: bool):
    @functools.wraps(handler)
    def run(request, response, storage, *args, **kwargs):
        with _ONE:
            have = _generation(storage, request)
            match = request.query.get("ifGenerationMatch")
            if match and match[0] != have:
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "At least one of the pre-conditions you "
                                                                 "specified did not hold."}})
                return None
            not_match = request.query.get("ifGenerationNotMatch")
            if reading and not_match and not_match[0] == have:
                response.status = HTTPStatus.NOT_MODIFIED
                return None
            out = handler(request, response, storage, *args, **kwargs)
            if reading and have != "0" and response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
                response["x-goog-generation"] = have
                response["x-goog-metageneration"] = "1"
            return out
    return run


PRIVATE, DENIED = "edge-jax-private", "edge-jax-denied"


def _refusing(handler):
    @functools.wraps(handler)
    def run(request, response, storage, *args, **kwargs):
        bucket = request.params.get("bucket_name")
        if bucket == PRIVATE and not request.get_header("authorization", None):
            response.status = HTTPStatus.UNAUTHORIZED
            response.json({"error": {"code": 401, "message": "Anonymous caller does not have storage.objects "
                                                             "access to the Google Cloud Storage bucket."}})
            return None
        if bucket == DENIED and request.method not in ("GET", "HEAD"):
            response.status = HTTPStatus.FORBIDDEN
            response.json({"error": {"code": 403, "message": "caller does not have storage.objects.create "
                                                             "access to the Google Cloud Storage bucket."}})
            return None
        return handler(request, response, storage, *args, **kwargs)
    return run


def _patch() -> None:
    http.server.HTTPServer = http.server.ThreadingHTTPServer
    # a listen backlog of 128, not socketserver's 5: the requests of a batch of reads arrive at once, each on a
    # connection of its own (the server closes each after one answer), and a full backlog drops a
    # handshake, which TCP then retries after 200 ms
    http.server.ThreadingHTTPServer.request_queue_size = 128
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects
    wrapped = {objects.download: _conditional(objects.download, reading=True),
               objects.insert: _conditional(objects.insert, reading=False),
               objects.delete: _conditional(objects.delete, reading=False)}
    for original, new in wrapped.items():
        setattr(objects, original.__name__, new)  # objects.get sends alt=media reads to download by name
    for _, methods in server.HANDLERS:
        for method, handler in methods.items():
            methods[method] = _refusing(wrapped.get(handler, handler))


if __name__ == "__main__":
    _patch()
    from gcp_storage_emulator.__main__ import main
    main(sys.argv[1:])
