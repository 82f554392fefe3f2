"""Safetensors checkpoints read one tensor at a time and written one tensor at a time, in plain numpy.

The format is an 8-byte little-endian header length, a JSON header (``name -> {dtype, shape,
data_offsets}``, plus ``__metadata__``) and the raw little-endian tensor bytes. :class:`Checkpoint` reads
the headers of every shard of an HF directory (one ``model.safetensors`` or the shards its
``model.safetensors.index.json`` lists), checks each file is as long as its header says (a truncated
download is named before anything is converted) and reads a tensor's own bytes only when asked, so
a checkpoint larger than memory converts in memory the size of its largest tensors.
:func:`write_shards` writes tensors in shards of at most ``max_shard_bytes`` with the index.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Callable, Iterable

import ml_dtypes
import numpy as np

from edge_jax.interop.family import Unsupported

DTYPES = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16),
          "F64": np.dtype(np.float64), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32)}
NAMES = {v: k for k, v in DTYPES.items()}
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER = 100 * 2**20


def read_header(path: str) -> tuple[int, dict]:
    """``(data start, header)`` of one safetensors file, its length checked against the header."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise Unsupported(f"{path} is not a safetensors file ({size} bytes); download it again")
        n = struct.unpack("<Q", raw)[0]
        if n > min(MAX_HEADER, size - 8):
            raise Unsupported(f"{path} is truncated or not a safetensors file (header of {n} bytes in a "
                              f"{size}-byte file); download it again")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise Unsupported(f"{path} has a damaged safetensors header ({e}); download it again") from e
    header.pop("__metadata__", None)
    end = max((int(v["data_offsets"][1]) for v in header.values()), default=0)
    if size < 8 + n + end:
        raise Unsupported(f"{path} is truncated: its header needs {8 + n + end} bytes, the file has {size}; "
                          "download it again")
    return 8 + n, header


class Checkpoint:
    """The tensors of an HF checkpoint directory, by name: ``shape``, ``dtype`` and ``read(name)``."""

    def __init__(self, directory: str, files: list[str] | None = None):
        """``files``: these files of ``directory`` (default: the index's, else ``model.safetensors``, else
        every ``*.safetensors``)."""
        self.directory = directory
        index = os.path.join(directory, INDEX)
        if files is not None:
            pass
        elif os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        elif os.path.exists(os.path.join(directory, SINGLE)):
            files = [SINGLE]
        else:
            files = sorted(n for n in os.listdir(directory)
                           if n.endswith(".safetensors") and not n.startswith("edge_jax_"))
        if not files:
            raise Unsupported(f"{directory} holds no *.safetensors weights (a .bin-only checkpoint must be saved "
                              "again with safe_serialization=True)")
        self.entries: dict[str, tuple[str, int, dict]] = {}
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.exists(path):
                raise Unsupported(f"{path} is listed in {INDEX} but missing; download it again")
            start, header = read_header(path)
            for key, info in header.items():
                self.entries[key] = (path, start, info)

    def names(self) -> list[str]:
        return list(self.entries)

    def dtype(self, name: str) -> np.dtype:
        code = self.entries[name][2]["dtype"]
        if code not in DTYPES:
            raise Unsupported(f"tensor {name!r} has dtype {code}, which edge_jax does not import (it takes "
                              f"{', '.join(DTYPES)}); dequantize the checkpoint first")
        return DTYPES[code]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(s) for s in self.entries[name][2]["shape"])

    def read(self, name: str) -> np.ndarray:
        """The tensor's own bytes, read from its file now (nothing else of the file is read)."""
        path, start, info = self.entries[name]
        begin, end = (int(x) for x in info["data_offsets"])
        dtype, shape = self.dtype(name), self.shape(name)
        if end - begin != dtype.itemsize * int(np.prod(shape)):
            raise Unsupported(f"tensor {name!r} in {path} spans {end - begin} bytes, not the {list(shape)} "
                              f"{info['dtype']} it declares; download it again")
        with open(path, "rb") as f:
            f.seek(start + begin)
            data = np.fromfile(f, dtype=dtype.newbyteorder("<"), count=int(np.prod(shape)))
        return data.reshape(shape)


def _header_bytes(items: list[tuple[str, tuple, np.dtype]]) -> bytes:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dtype in items:
        n = int(np.prod(shape)) * dtype.itemsize
        header[name] = {"dtype": NAMES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)


def write_shards(directory: str, items: list[tuple[str, tuple, np.dtype]], produce: Callable[[], Iterable],
                 max_shard_bytes: int = 5 * 10**9, single: str = SINGLE) -> list[str]:
    """Write ``items`` (``(name, shape, dtype)``, in order) as safetensors shards of at most
    ``max_shard_bytes`` (one tensor may exceed it alone) into ``directory``; ``produce()`` yields the
    arrays in the same order, one at a time. One shard is named ``single``; more get HF's names and index."""
    groups: list[list] = [[]]
    size = 0
    for item in items:
        n = int(np.prod(item[1])) * item[2].itemsize
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += n
    names = [single] if len(groups) == 1 else [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
                                               for i in range(len(groups))]
    arrays = iter(produce())
    for name, group in zip(names, groups):
        raw = _header_bytes(group)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for key, shape, dtype in group:
                a = np.ascontiguousarray(next(arrays), dtype=dtype.newbyteorder("<"))
                if a.shape != tuple(shape):
                    raise ValueError(f"tensor {key!r} came out {list(a.shape)}, planned {list(shape)}")
                f.write(a.reshape(-1).view(np.uint8).data)
    if len(names) > 1:
        total = sum(int(np.prod(s)) * d.itemsize for _, s, d in items)
        weight_map = {key: name for name, group in zip(names, groups) for key, _, _ in group}
        with open(os.path.join(directory, INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return names
