"""Greedy decoding by full re-forward: the simple reference that runs any model (the KV-cache decoder is
:mod:`edge_jax.infer.decode`, checked against this one).

Prompts are left-aligned in a fixed ``[B, L]`` buffer so one compiled function serves every step:
causality means the padding after a prompt never affects the logits read at its last position.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.models.inputs import apply_kwargs


def greedy_generate(apply_fn, params, prompts: list[list[int]], max_new_tokens: int, pad_id: int,
                    stop_ids: tuple[int, ...] = (), max_len: int | None = None,
                    host_fn=None) -> list[list[int]]:
    """Continue each prompt with up to ``max_new_tokens`` argmax tokens, stopping at ``stop_ids``.

    ``host_fn(tokens_BT) -> dict`` gives the model's host inputs (:mod:`edge_jax.models.inputs`) each step."""
    longest = max(len(p) for p in prompts)
    L = max_len or longest + max_new_tokens
    if longest + max_new_tokens > L:
        raise ValueError(f"prompt of {longest} tokens + {max_new_tokens} new exceeds max_len={L}; raise max_len")
    buf = np.full((len(prompts), L), pad_id, np.int32)
    lengths = np.array([len(p) for p in prompts], np.int32)
    for i, p in enumerate(prompts):
        buf[i, :len(p)] = p

    @jax.jit
    def next_tokens(params, tokens_BT, lengths_B, extra):
        logits = apply_fn({"params": params}, tokens_BT, **apply_kwargs(extra))
        last = jnp.take_along_axis(logits, (lengths_B - 1)[:, None, None], axis=1)[:, 0]
        return jnp.argmax(last, axis=-1).astype(jnp.int32)

    out = [[] for _ in prompts]
    done = np.zeros(len(prompts), bool)
    for _ in range(max_new_tokens):
        tok = np.asarray(next_tokens(params, buf, lengths, host_fn(buf) if host_fn else {}))
        for i in np.flatnonzero(~done):
            if tok[i] in stop_ids:
                done[i] = True
                continue
            out[i].append(int(tok[i]))
            buf[i, lengths[i]] = tok[i]
            lengths[i] += 1
        if done.all():
            break
    return out


def exact_match(apply_fn, params, tokenizer, qa: list[dict], max_new_tokens: int = 16,
                batch_size: int = 32, host_fn=None) -> dict:
    """Share of questions whose greedy answer (stripped, up to the first newline) equals the answer."""
    hits, per_task = 0, {}
    stop = (tokenizer.eos_id,)
    for start in range(0, len(qa), batch_size):
        chunk = qa[start:start + batch_size]
        prompts = [tokenizer.encode(q["prompt"]) for q in chunk]
        answers = greedy_generate(apply_fn, params, prompts, max_new_tokens, tokenizer.pad_id, stop,
                                  host_fn=host_fn)
        for q, ids in zip(chunk, answers):
            got = tokenizer.decode(ids).strip().split("\n")[0].strip()
            ok = got == q["answer"].strip()
            hits += ok
            t = per_task.setdefault(q.get("task", "all"), [0, 0])
            t[0], t[1] = t[0] + ok, t[1] + 1
    out = {"exact_match": hits / max(len(qa), 1), "questions": len(qa)}
    out.update({f"exact_match/{k}": v[0] / v[1] for k, v in sorted(per_task.items())})
    return out


def answer_nll(apply_fn, params, tokenizer, qa: list[dict], batch_size: int = 32, host_fn=None) -> dict:
    """Teacher-forced mean negative log-likelihood (nats per token) of each gold answer after its
    prompt, averaged over questions: a graded knowledge probe that still moves when a small model's
    greedy exact match is at zero. The answer is the text after ``prompt + " "``, as in training."""
    seqs, starts = [], []
    for q in qa:
        prompt = tokenizer.encode(q["prompt"])
        full = tokenizer.encode(q["prompt"] + " " + q["answer"].strip())
        if full[:len(prompt)] != prompt:  # tokenisation merged across the boundary: keep the pieces apart
            full = prompt + tokenizer.encode(" " + q["answer"].strip())
        seqs.append(full)
        starts.append(len(prompt))
    L = max(len(s) for s in seqs)

    @jax.jit
    def token_nll(params, tokens_BT, extra):
        logp = jax.nn.log_softmax(apply_fn({"params": params}, tokens_BT, **apply_kwargs(extra))[:, :-1], axis=-1)
        return -jnp.take_along_axis(logp, tokens_BT[:, 1:, None], axis=-1)[..., 0]

    per_question = []
    for b in range(0, len(seqs), batch_size):
        chunk = seqs[b:b + batch_size]
        buf = np.full((batch_size, L), tokenizer.pad_id, np.int32)
        for i, s in enumerate(chunk):
            buf[i, :len(s)] = s
        nll = np.asarray(token_nll(params, buf, host_fn(buf) if host_fn else {}))
        for i, s in enumerate(chunk):
            per_question.append(float(nll[i, starts[b + i] - 1:len(s) - 1].mean()))
    return {"answer_nll": float(np.mean(per_question)) if per_question else float("nan")}
