"""Log-likelihood of (context, continuation) requests, as lm-evaluation-harness's HF model scores them.

Tokenisation (:func:`encode_pair`, lm-eval's ``_encode_pair``): trailing whitespace of the context
moves to the continuation; the continuation's tokens are those of ``context + continuation`` after
the context's own tokens; an empty context becomes the eos id. A request's row is
``(context + continuation)[-(max_length + 1):][:-1]`` (the context truncated from the left), and its
result is the summed log-probability of the continuation tokens and whether each of them is the
argmax (``is_greedy``).

:class:`Scorer` is the fast path: requests tokenised in one ``encode_many`` call (each distinct
text once: the choices of a document share its context), rows sorted by length (longest first),
right-padded to a length bucket (:func:`bucket`: 8 lengths per doubling from 32, capped at
``max_length``) in batches of a fixed size, so each shape compiles once; one jitted step runs the
model to its final hidden states and makes vocabulary logits only at the continuation positions
(gathered to a width of the next power of two, at least 32, of the batch's longest continuation),
then every row's sum and greedy flag; the next batch is built and dispatched before the previous
one's results are read back; batches are placed on the mesh's data axis.
:func:`loglikelihoods_reference` scores one request at a time at its exact length.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.eval.tasks import TaskError
from edge_jax.models.head import split_features, vocab_logits
from edge_jax.models.inputs import apply_kwargs
from edge_jax.sharding import batch_sharding, on_mesh, process_rows, replicated, to_global

MIN_BUCKET = 32
MIN_CONT_BUCKET = 32
BUCKET_STEPS = 8  # length buckets per doubling: past 32 tokens, under 1/8 of a row is padding


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) by lm-eval's rules for a causal model."""
    if not context:
        cont = list(tokenizer.encode(continuation))
        if cont and cont[0] == tokenizer.eos_id:
            return cont[:1], cont[1:]
        return [tokenizer.eos_id], cont
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = list(tokenizer.encode(context + continuation))
    ctx = list(tokenizer.encode(context))
    return ctx, whole[len(ctx):]


def _split(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's move of the context's trailing whitespace to the continuation."""
    spaces = len(context) - len(context.rstrip())
    return (context[:-spaces], context[-spaces:] + continuation) if spaces else (context, continuation)


def encode_pairs(tokenizer, requests: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """:func:`encode_pair` of every request, each distinct text encoded once, in one
    ``encode_many`` call where the tokenizer has it."""
    texts: dict[str, None] = {}
    for context, continuation in requests:
        if context:
            ctx, cont = _split(context, continuation)
            texts.update({ctx: None, ctx + cont: None})
        else:
            texts[continuation] = None
    order = list(texts)
    many = getattr(tokenizer, "encode_many", None)
    encoded = [a.tolist() for a in many(order)] if many else [list(tokenizer.encode(t)) for t in order]
    ids = dict(zip(order, encoded))
    out = []
    for context, continuation in requests:
        if not context:
            cont = ids[continuation]
            out.append((cont[:1], cont[1:]) if cont and cont[0] == tokenizer.eos_id else ([tokenizer.eos_id], cont))
            continue
        ctx, cont = _split(context, continuation)
        ctx_ids = ids[ctx]
        out.append((ctx_ids, ids[ctx + cont][len(ctx_ids):]))
    return out


def request_row(ctx: Sequence[int], cont: Sequence[int], max_length: int, truncate: bool = True
                ) -> tuple[list[int], int]:
    """(input ids, number of continuation tokens): what the model reads for one request."""
    if not cont:
        raise TaskError("a continuation encodes to no tokens; every choice must be non-empty text")
    if len(cont) > max_length:
        raise TaskError(f"a continuation of {len(cont)} tokens is longer than the model's {max_length}; "
                        "raise --max-length")
    seq = list(ctx) + list(cont)
    if len(seq) - 1 > max_length and not truncate:
        raise TaskError(f"a request of {len(seq) - 1} tokens is longer than the model's {max_length} and "
                        "truncation is off; raise --max-length or allow left truncation")
    return seq[-(max_length + 1):][:-1], len(cont)


def bucket(n: int, max_length: int, steps: int = BUCKET_STEPS) -> int:
    """The padded length for a row of ``n`` tokens: the next of 32 and, within each doubling after it,
    ``steps`` evenly spaced lengths (steps 8: 32, 36, 40, ..., 64, 72, ...; steps 1: the powers of two),
    capped at ``max_length``."""
    size = MIN_BUCKET
    while size < n:
        size += max((1 << (size.bit_length() - 1)) // steps, 1)
    return min(size, max_length) if n <= max_length else n


@dataclasses.dataclass
class Scorer:
    """Scores requests with a model: ``apply_fn({"params": params}, tokens_BT, features_only=True,
    host_inputs=host_fn(tokens))`` gives the final hidden states ``[B, T, D]`` and the head's weight
    ``[D, V]`` (and bias ``[V]``, ``DecoderLM``'s ``features_only``). With a ``mesh``, each batch's rows are split over
    its data and fsdp axes (``batch_size`` must be a multiple of their size; every process builds the
    same batch and keeps its rows) and the results come back replicated. ``bucket_steps``: padded
    lengths per doubling (:func:`bucket`; more: less padding, more shapes to compile)."""
    apply_fn: Callable
    params: object
    tokenizer: object
    max_length: int
    batch_size: int = 16
    host_fn: Callable | None = None
    mesh: object = None
    truncate: bool = True
    progress: bool = True
    bucket_steps: int = BUCKET_STEPS

    def __post_init__(self):
        apply_fn = self.apply_fn

        def step(params, tokens_BT, index_BC, targets_BC, mask_BC, extra):
            h_BTD, w_DV, b_V = split_features(apply_fn({"params": params}, tokens_BT, features_only=True,
                                                       **apply_kwargs(extra)))
            logits = vocab_logits(jnp.take_along_axis(h_BTD, index_BC[..., None], axis=1), w_DV, b_V)
            logp = jax.nn.log_softmax(logits, axis=-1)
            target_lp = jnp.take_along_axis(logp, targets_BC[..., None], axis=-1)[..., 0]
            greedy = jnp.argmax(logits, axis=-1) == targets_BC
            return (jnp.sum(jnp.where(mask_BC, target_lp, 0.0), axis=1),
                    jnp.all(greedy | ~mask_BC, axis=1))

        if self.mesh is None:
            self._step = jax.jit(step)
        else:
            ways = self.mesh.shape["data"] * self.mesh.shape["fsdp"]
            if self.batch_size % ways:
                raise TaskError(f"eval batch size {self.batch_size} is not a multiple of the mesh's {ways} data x fsdp "
                                f"devices; pass a multiple of {ways}")
            self._step = on_mesh(self.mesh, jax.jit(step, out_shardings=replicated(self.mesh)))

    def rows(self, requests: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """(inputs, continuation tokens) per request; the continuation's tokens are the targets of
        the inputs' last ``len(continuation)`` positions."""
        return [(request_row(ctx, cont, self.max_length, self.truncate)[0], cont)
                for ctx, cont in encode_pairs(self.tokenizer, requests)]

    def __call__(self, requests: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(summed log-likelihood, is_greedy) per request, in the order given."""
        return self.score_rows(self.rows(requests))

    def score_rows(self, rows: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """:meth:`__call__` on rows already made by :meth:`rows`."""
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        results: list[tuple[float, bool] | None] = [None] * len(rows)
        pad = self.tokenizer.pad_id
        batches = [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        pending: list = []  # (rows, step output) dispatched and not yet read back
        for idx in _progress(batches, self.progress, len(rows)):
            T = bucket(len(rows[idx[0]][0]), self.max_length, self.bucket_steps)
            C = min(_power_of_two(max(len(rows[i][1]) for i in idx), MIN_CONT_BUCKET), T)
            tokens = np.full((self.batch_size, T), pad, np.int32)
            index = np.zeros((self.batch_size, C), np.int32)
            targets = np.zeros((self.batch_size, C), np.int32)
            mask = np.zeros((self.batch_size, C), bool)
            for b, i in enumerate(idx):
                inputs, cont = rows[i]
                L, n = len(inputs), len(cont)
                tokens[b, :L] = inputs
                index[b, :n], index[b, n:] = np.arange(L - n, L), L - 1
                targets[b, :n], mask[b, :n] = cont, True
            batch = {"tokens": tokens, "index": index, "targets": targets, "mask": mask,
                     **(self.host_fn(tokens) if self.host_fn else {})}
            if self.mesh is not None:
                rows_sharding = batch_sharding(self.mesh)
                batch = to_global(process_rows(batch, rows_sharding), rows_sharding)
            arrays = [batch.pop(k) for k in ("tokens", "index", "targets", "mask")]
            pending.append((idx, self._step(self.params, *arrays, batch)))
            if len(pending) > 1:  # the previous batch's results, while this one runs
                _collect(*pending.pop(0), results)
        for args in pending:
            _collect(*args, results)
        return results  # type: ignore[return-value]


def _collect(idx, out, results) -> None:
    ll, greedy = jax.device_get(out)
    for b, i in enumerate(idx):
        results[i] = (float(ll[b]), bool(greedy[b]))


def _power_of_two(n: int, low: int) -> int:
    size = low
    while size < n:
        size *= 2
    return size


def _progress(batches, show: bool, n_requests: int):
    if not show:
        return batches
    from tqdm import tqdm
    return tqdm(batches, desc=f"scoring {n_requests} requests", unit="batch", leave=False)


def loglikelihoods_reference(apply_fn, params, tokenizer, requests: Sequence[tuple[str, str]], max_length: int,
                             host_fn=None) -> list[tuple[float, bool]]:
    """The naive path: each request alone, unpadded, log-probabilities summed in float64 on the host."""
    out = []
    for context, continuation in requests:
        ctx, cont = encode_pair(tokenizer, context, continuation)
        inputs, n = request_row(ctx, cont, max_length)
        tokens = np.asarray([inputs], np.int32)
        logits = np.asarray(apply_fn({"params": params}, tokens, **apply_kwargs(host_fn(tokens) if host_fn else {})),
                            np.float64)[0, -n:]
        top = logits.max(-1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        out.append((float(sum(logp[j, t] for j, t in enumerate(cont))),
                    bool(all(np.argmax(logits[j]) == t for j, t in enumerate(cont)))))
    return out
