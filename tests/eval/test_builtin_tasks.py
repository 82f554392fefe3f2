"""The built-in zero-shot tasks: seeded, held out, well-formed."""
import collections

import pytest

from edge_jax.config import load_config
from edge_jax.data.builders.facts import ATTRIBUTES, TEMPLATES, make_people
from edge_jax.data.sources import resolve
from edge_jax.data.tokenizers import ByteTokenizer
from edge_jax.eval import builtin  # noqa: F401  (registers the tasks)
from edge_jax.eval.scorer import encode_pair
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, BuiltinSource, TaskError, build_examples, expand


@pytest.fixture
def source():
    """The run's data config (pystdlib in $EDGE_JAX_DATA, shared with the other tests) and a byte tokenizer."""
    data = load_config("configs/lm.py:size=tiny", {"data.name": "pystdlib+facts*4", "data.facts_entities": 60}).data
    return BuiltinSource(data, ByteTokenizer(), 128)


def _docs(name, source, split="test"):
    return ZERO_SHOT_TASKS.get(name).load(source, split)


@pytest.mark.parametrize("name", ["facts_mc", "code_cloze", "longctx_mc"])
def test_documents_are_seeded_and_well_formed(name, source):
    docs = _docs(name, source)
    assert docs == _docs(name, source) and len(docs) >= 50
    for d in docs:
        assert len(d["choices"]) == 4 == len(set(d["choices"])) and 0 <= d["gold"] < 4
    golds = collections.Counter(d["gold"] for d in docs)
    assert len(golds) == 4 and max(golds.values()) < 0.4 * len(docs)  # the gold position is shuffled
    ex = build_examples(ZERO_SHOT_TASKS.get(name), docs)
    assert all(len(e.requests) == 4 for e in ex)


def test_facts_mc_asks_held_out_wordings_with_same_type_distractors(source):
    docs = _docs("facts_mc", source)
    people = make_people(60, 0)
    asked_half = {p["name"] for p in people[:30]}   # the people whose QA pairs are trained
    by_attr = {a: {p[a] for p in people} for a in ATTRIBUTES}
    for d in docs:
        question = d["text"][len("Question: "):-len("\nAnswer:")]
        assert any(question == t.format(n=n) for t in TEMPLATES[d["attribute"]][3] for n in asked_half)
        assert not any(question == t.format(n=n) for a in ATTRIBUTES for t in TEMPLATES[a][2] for n in asked_half)
        assert set(d["choices"]) <= by_attr[d["attribute"]]
    shots = _docs("facts_mc", source, "train")
    assert not any(n in shot["text"] for shot in shots for n in asked_half)   # shots ask about other people
    examples = build_examples(ZERO_SHOT_TASKS.get("facts_mc"), docs[:5], shots, k=2)
    assert all(e.requests[0][0].count("Question:") == 3 for e in examples)
    # a run that does not train on facts gets the default corpus size
    other = BuiltinSource(load_config("configs/lm.py:size=tiny").data, ByteTokenizer(), 128)
    assert _docs("facts_mc", other) != docs


def test_code_cloze_is_held_out_and_distractors_come_from_other_files(source):
    docs = _docs("code_cloze", source)
    validation = resolve("pystdlib").documents("validation")
    train = set(resolve("pystdlib").documents("train"))
    for d in docs[:100]:
        owner = [v for v in validation if d["text"][-200:] in v]
        assert owner, "the context is text of a validation file"
        gold = d["choices"][d["gold"]]
        assert (d["text"][-200:] + gold) in owner[0]            # the real next line
        indent = gold[:len(gold) - len(gold.lstrip())]
        for c in d["choices"]:
            assert c.startswith(indent) and c.strip() and c != gold or c is gold
        assert owner[0] not in train
    assert ZERO_SHOT_TASKS.get("code_cloze").format.requests(docs[0])[0][1] == docs[0]["choices"][0]  # no delimiter


def test_longctx_mc_fits_the_model_and_asks_a_key_of_the_text(source):
    docs = _docs("longctx_mc", source)
    for d in docs:
        key = d["text"].split("Question: What is ")[1].split("?")[0]
        body = d["text"].split("\nQuestion:")[0]
        assert f"{key} is {d['choices'][d['gold']]}." in body
        assert all(f" is {c}." in body for c in d["choices"])  # the distractors are the other keys' values
        for context, continuation in ZERO_SHOT_TASKS.get("longctx_mc").format.requests(d):
            ctx, cont = encode_pair(source.tokenizer, context, continuation)
            assert len(ctx) + len(cont) <= source.max_length
    assert max(len(d["text"]) for d in docs) > 100                 # the filler fills the window
    longer = _docs("longctx_mc", BuiltinSource(source.data_cfg, source.tokenizer, 1024))
    assert min(len(d["text"]) for d in longer) > 900
    with pytest.raises(TaskError, match="longctx_mc needs more than 32 tokens"):
        _docs("longctx_mc", BuiltinSource(source.data_cfg, source.tokenizer, 32))


def test_builtin_group():
    assert expand("builtin") == ["facts_mc", "code_cloze", "longctx_mc"]
    tasks = [ZERO_SHOT_TASKS.get(n) for n in expand("builtin")]
    assert all(t.builtin and t.version.startswith("edge_jax") for t in tasks)
