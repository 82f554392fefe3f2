"""EdgeInfinite Table 2: without window tokens, without sink tokens, without both.

    edge-jax grid ablations/edgeinfinite_tokens.py --preset tiny --seeds 3

One trained gate per seed (the shared stage); the cells switch the tokens off at inference only
(model.infini_keep_window / infini_keep_sink). "full" is the edgeinfinite cell of edgeinfinite_main.
The tiny prompt lengths come in pairs (edge_jax/papers/edgeinfinite/layouts.py): at one of each pair
dropping the window compresses one more segment with the sink, at the other without it, so every two
cells keep different prompt tokens at one length or more of each pair; the sink pairs at every length.
"""
from edge_jax.papers.edgeinfinite.grid import TABLE2, edgeinfinite_cell, grid


def get_grid(preset: str) -> dict:
    cells = {"full": edgeinfinite_cell(), "no_window": edgeinfinite_cell(infini_keep_window=False),
             "no_sink": edgeinfinite_cell(infini_keep_sink=False),
             "no_both": edgeinfinite_cell(infini_keep_window=False, infini_keep_sink=False)}
    return grid(preset, "edgeinfinite_tokens", "EdgeInfinite Table 2: sink and window tokens", cells, TABLE2,
                "EdgeInfinite Table 2 (Avg)",
                "Without window tokens only the newest token stays after a compression; without sink tokens "
                "the first segment starts at token 0 and nothing precedes a segment.",
                explanations=EXPLANATIONS if preset == "tiny" else {})


# Shown where the answer NLL (categories.md) reverses a pair significantly.
EXPLANATIONS = {
    "no_window>no_sink": "at the lengths 63 mod 128 (half the prompts) "
                         "no_window keeps only the last 20-31 tokens after "
                         "the sink, fewer than the question and its 'Answer:' (38-80 characters), so the question's "
                         "start is read from the compressed memory; no_sink keeps the last 52-63 there (148-159 at "
                         "the other lengths), most or all of the question, and loses only the 32 sink tokens",
    "no_window>no_both": "at the lengths 63 mod 128 no_window keeps the last 20-31 tokens after the sink where no_both "
                         "keeps the last 52-63 (most of the question and its 'Answer:'); at 31 mod 128 it is the other "
                         "way round (116-127 against 20-31), and the records keep no NLL per length, so which half "
                         "carries the gap is not measured; it is largest on few_shot and code_tracking",
}
