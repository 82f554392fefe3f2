import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.data import get_tokenizer
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.generate import answer_nll, exact_match, greedy_generate


def test_padded_greedy_matches_exact_length_reference():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64)
    model = DecoderLM(cfg)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), jnp.ones((1, 4), jnp.int32)))["params"]
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(1, 64, n)) for n in (3, 6)]
    got = greedy_generate(model.apply, params, prompts, max_new_tokens=4, pad_id=0)
    apply = jax.jit(model.apply)
    for prompt, out in zip(prompts, got):
        seq = list(prompt)
        for _ in range(4):  # reference: re-run on the exact, unpadded sequence
            logits = apply({"params": params}, jnp.asarray([seq], jnp.int32))
            seq.append(int(jnp.argmax(logits[0, -1])))
        assert out == seq[len(prompt):]


def test_exact_match_scores_and_stops_at_eos(tmp_path):
    tok = get_tokenizer("byte", "pystdlib", str(tmp_path))
    answer = list(" Kelm\n".encode())

    def fake_apply(variables, tokens_BL):
        """Predicts the next byte of ' Kelm' after the prompt's final ':' and eos afterwards."""
        B, L = tokens_BL.shape
        colon = jnp.argmax(tokens_BL == ord(":"), axis=1)
        offs = jnp.arange(L)[None] - colon[:, None]
        table = jnp.asarray(answer + [tok.eos_id] * L)
        nxt = table[jnp.clip(offs, 0, len(answer) + L - 1)]
        return jax.nn.one_hot(nxt, tok.vocab_size) * 10.0

    qa = [{"prompt": "Where was Ada born? Answer:", "answer": "Kelm", "task": "birthplace"},
          {"prompt": "What does Bo do? Answer:", "answer": "baker", "task": "job"}]
    out = exact_match(fake_apply, None, tok, qa, max_new_tokens=8)
    assert out["exact_match"] == 0.5 and out["exact_match/birthplace"] == 1.0 and out["exact_match/job"] == 0.0


def test_answer_nll_matches_a_per_question_reference(tmp_path):
    tok = get_tokenizer("byte", "pystdlib", str(tmp_path))
    cfg = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64,
                      init_std=0.3)
    model = DecoderLM(cfg)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(1), jnp.ones((1, 4), jnp.int32)))["params"]
    qa = [{"prompt": "Q: who? Answer:", "answer": "Kelm"}, {"prompt": "Q: job of Bo? Answer:", "answer": "baker"}]
    got = answer_nll(model.apply, params, tok, qa, batch_size=4)["answer_nll"]
    want = []
    for q in qa:
        prompt, full = tok.encode(q["prompt"]), tok.encode(q["prompt"] + " " + q["answer"])
        logp = jax.nn.log_softmax(model.apply({"params": params}, jnp.asarray([full]))[0], axis=-1)
        want.append(-np.mean([float(logp[t - 1, full[t]]) for t in range(len(prompt), len(full))]))
    assert np.isclose(got, np.mean(want), rtol=1e-5) and got > 0.5
