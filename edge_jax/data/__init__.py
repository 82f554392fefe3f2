"""Data layer: built-in TFDS datasets (no download), tokenizers and grain pipelines.

    tok = get_tokenizer(cfg.data.tokenizer, cfg.data.name, data_dir)
    it = make_train_iter(cfg.data, tok, seed, *process_block(batch_sharding(mesh), cfg.data.batch_size))
    batch = next(it)            # {"inputs", "targets"}: int32[B_local, T], this process's rows
    state = it.get_state()      # JSON-able; it.set_state(state) replays the same batches
    evals = make_eval_batches(cfg.data, tok)   # + "mask": float32[B, T]
    qa = load_qa(cfg.data, data_dir)            # facts / longctx questions

Heavy imports (tensorflow_datasets, grain, sentencepiece) happen on first use.
"""
from edge_jax.data.errors import DataError
from edge_jax.data.pipeline import make_eval_batches, make_train_iter, split_tokens
from edge_jax.data.sources import data_dir_default, load_qa, resolve, resolve_cfg
from edge_jax.data.tokenizers import get_tokenizer

__all__ = ["DataError", "data_dir_default", "get_tokenizer", "load_qa", "make_eval_batches",
           "make_train_iter", "resolve", "resolve_cfg", "split_tokens"]
