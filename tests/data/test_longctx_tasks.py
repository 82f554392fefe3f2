"""The five long-context tasks of `edge_longctx` and `eval_prompts` (pure Python, fast)."""
import random
import re
import string
import time

import pytest

from edge_jax.data.builders import longctx_tasks as longctx
from edge_jax.data.builders import longctx_tfds
from edge_jax.data.builders.longctx_tasks import CATEGORIES, TASKS, eval_prompts

LENGTHS = (1024, 4096, 16384)
FIELDS = {"prompt", "answer", "task", "category", "text"}
_DEMO = re.compile(r"Example: ([a-z]+) -> ([a-z]+)\.")
_ASSIGN = re.compile(r"VAR ([a-z]+) = ([a-z]+|\d+) \.")


def _shift_of(x: str, y: str) -> int:
    """The letter shift that turns x into y, or -1 when no single shift does."""
    if len(x) != len(y) or not x:
        return -1
    shifts = {(ord(b) - ord(a)) % 26 for a, b in zip(x, y)}
    return shifts.pop() if len(shifts) == 1 else -1


def _resolve(prompt: str) -> tuple[str, str]:
    """(queried variable, the value it resolves to) by parsing the assignments back."""
    pairs = _ASSIGN.findall(prompt)
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), "a variable is assigned twice"
    values = dict(pairs)
    order = {name: i for i, name in enumerate(names)}
    var = re.search(r"value of variable ([a-z]+)\?\nAnswer:$", prompt).group(1)
    seen, cur = [], var
    while not cur.isdigit():
        assert cur not in seen, "cyclic chain"
        seen.append(cur)
        nxt = values[cur]
        if not nxt.isdigit():
            assert order[nxt] < order[cur], "a variable is used before it is assigned"
        cur = nxt
    assert 2 <= len(seen) <= 4, seen  # chain length
    assert 1 <= len(pairs) - len(seen) <= 3  # distractors
    return var, cur


def check_record(r: dict, length: int, drawn_at: int = 0) -> None:
    """Every property a record of eval_prompts must have (raises AssertionError); ``drawn_at``: the
    length its needles were drawn for (``length`` when 0)."""
    assert set(r) == FIELDS
    p, a, task = r["prompt"], r["answer"], r["task"]
    assert r["category"] == CATEGORIES[task]
    assert length - 64 <= len(p) <= length, (task, length, len(p))
    assert p.isascii() and p.endswith("\nAnswer:") and r["text"] == f"{p} {a}"
    assert a and re.fullmatch(r"[0-9a-z]+", a), a
    if task in ("passkey", "multikey", "vartrack"):  # retrieval: the answer is in the prompt
        assert a in p
    if task == "passkey":
        assert re.fullmatch(r"\d{5}", a) and f"The pass key is {a}." in p
    elif task == "multikey":
        key = re.search(r"value of key (\S+)\?", p).group(1)
        assert re.findall(rf"The value of key {key} is (\d+)\.", p) == [a]
        assert 4 <= len(re.findall(r"The value of key \S+ is \d+\.", p)) <= longctx._multikey_keys(drawn_at or length)
    elif task == "aggregate":
        points = [int(v) for v in re.findall(r"Tally note: add (\d) points\.", p)]
        assert 4 <= len(points) <= 8 and sum(points) == int(a)
    elif task == "fewshot":
        demos = _DEMO.findall(p)
        assert 4 <= len(demos) <= 8
        shifts = {_shift_of(x, y) for x, y in demos}
        assert len(shifts) == 1 and 1 <= min(shifts) <= 25, shifts  # one consistent rule
        query = re.search(r"what does ([a-z]+) become\?\nAnswer:$", p).group(1)
        assert 3 <= len(query) <= 5 and query not in {x for x, _ in demos}
        assert a == longctx.shift_word(query, shifts.pop())
    else:
        assert task == "vartrack"
        _, value = _resolve(p)
        assert value == a and re.fullmatch(r"\d{5}", a)


def test_tasks_and_categories():
    assert TASKS == ("passkey", "multikey", "aggregate", "fewshot", "vartrack")
    assert CATEGORIES == {"passkey": "single_needle", "multikey": "multi_key",
                          "aggregate": "aggregation", "fewshot": "few_shot",
                          "vartrack": "code_tracking"}
    rng = random.Random(0)
    tasks = [r["task"] for r in longctx_tfds.generate_split("qa", 600, 40, 0)]
    assert tasks == list(TASKS) * 2
    for task in TASKS:
        check_record({**longctx.make_example(rng, task, 2000), "category": CATEGORIES[task]}, 2000)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("task", TASKS)
def test_eval_prompts_well_formed(task, length):
    records = eval_prompts(task, length, 6, seed=1)
    assert len(records) == 6 and all(r["task"] == task for r in records)
    for r in records:
        check_record(r, length)
    assert len({r["prompt"] for r in records}) == 6


@pytest.mark.parametrize("task", TASKS)
def test_eval_prompts_at_min_length(task):
    need = longctx.min_length(task)
    for r in eval_prompts(task, need, 20, seed=0):
        check_record(r, need)


def test_eval_prompts_deterministic():
    for task in TASKS:
        a = eval_prompts(task, 1024, 5, seed=3)
        assert a == eval_prompts(task, 1024, 5, seed=3)
        assert [r["prompt"] for r in a] != [r["prompt"] for r in eval_prompts(task, 1024, 5, 4)]
        assert a != eval_prompts(task, 1100, 5, seed=3)
    # its own stream: unaffected by the global random state or the builder's streams
    random.seed(123)
    x = eval_prompts("vartrack", 2048, 3, 0)
    random.seed(456)
    assert eval_prompts("vartrack", 2048, 3, 0) == x


def test_needle_depths_vary():
    """The needle of passkey lands at many depths, including near both ends."""
    depths = []
    for r in eval_prompts("passkey", 4096, 60, seed=0):
        depths.append(r["prompt"].index("The pass key is") / len(r["prompt"]))
    assert min(depths) < 0.15 and max(depths) > 0.85
    assert len({round(d, 1) for d in depths}) >= 8


def test_fewshot_rule_varies_and_vartrack_order():
    shifts = set()
    for r in eval_prompts("fewshot", 1024, 40, seed=0):
        x, y = _DEMO.findall(r["prompt"])[0]
        shifts.add(_shift_of(x, y))
    assert len(shifts) >= 10  # a per-prompt rule, not one global shift
    sizes = set()
    for r in eval_prompts("vartrack", 1024, 40, seed=0):
        _resolve(r["prompt"])
        sizes.add(len(_ASSIGN.findall(r["prompt"])))
    assert sizes == set(range(3, 8))  # 2-4 chain + 1-3 distractors


def test_shift_word():
    assert longctx.shift_word("abz", 2) == "cdb"
    assert longctx.shift_word(string.ascii_lowercase, 25)[:2] == "za"


def test_checker_can_fail():
    r = eval_prompts("vartrack", 1024, 1, seed=0)[0]
    wrong = next(v for _, v in _ASSIGN.findall(r["prompt"]) if v.isdigit() and v != r["answer"])
    with pytest.raises(AssertionError):  # a distractor's number: present, but not the answer
        check_record({**r, "answer": wrong, "text": f"{r['prompt']} {wrong}"}, 1024)
    r = eval_prompts("fewshot", 1024, 1, seed=0)[0]
    wrong = longctx.shift_word(r["answer"], 1)
    with pytest.raises(AssertionError):
        check_record({**r, "answer": wrong, "text": f"{r['prompt']} {wrong}"}, 1024)
    with pytest.raises(AssertionError):
        check_record(r, 2048)  # too short for that length


def test_bad_inputs():
    with pytest.raises(ValueError, match="pick one of passkey") as err:
        eval_prompts("needle", 1024, 1, 0)
    assert "\n" not in str(err.value)
    for task in TASKS:
        need = longctx.min_length(task)
        assert need <= 1024
        with pytest.raises(ValueError, match=f"use length >= {need}") as err:
            eval_prompts(task, need - 1, 1, 0)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="n must be"):
        eval_prompts("passkey", 1024, -1, 0)
    assert eval_prompts("passkey", 1024, 0, 0) == []


def test_fast():
    start = time.perf_counter()
    for task in TASKS:
        eval_prompts(task, 16384, 20, seed=0)
    assert time.perf_counter() - start < 1.0


def test_multikey_fits_its_keys_to_the_length():
    assert longctx.min_length("multikey") == 371 and longctx._multikey_keys(371) == 4
    assert longctx._multikey_keys(500) == 6 and longctx._multikey_keys(547) == 8 == longctx._multikey_keys(9000)
    counts = {len(re.findall(r"The value of key", r["prompt"])) for r in eval_prompts("multikey", 500, 60, 0)}
    assert counts == {4, 5, 6}
    counts = {len(re.findall(r"The value of key", r["prompt"])) for r in eval_prompts("multikey", 4096, 60, 0)}
    assert counts == set(range(4, 9))
