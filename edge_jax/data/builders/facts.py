"""`edge_facts`: a seeded synthetic knowledge corpus for recall (fully determined by seed, N).

N invented people, each with six attributes (birthplace, birth year, occupation, favourite
colour, instrument, pet). Every attribute has four training sentence templates, two held-out
sentence templates, two training question templates and two held-out question templates.

Splits (records: text, prompt, answer, task):
  train       two biographies per person (all six facts, random order and templates), plus one
              question-answer document per attribute for the first half of the people
              ("QA-trained"), so the model learns the answer format.
  validation  one biography in the held-out sentence templates for every 10th person.
  qa          for every person of the other half: one question per attribute in a held-out
              question template. The facts are in training, the question wording and the
              question-answer pairing for that person are not (knowledge extraction).

Question format: prompt = "Question: <q>\nAnswer:", answer = the value, text = prompt + " " +
answer. Score by exact match of the generated text (stripped, up to newline/eos).
"""
from __future__ import annotations

import dataclasses
import random

import tensorflow_datasets as tfds

from edge_jax.data.builders.records import RecordsBuilder

_ON = ["ka", "lo", "mi", "ra", "ven", "tor", "si", "bel", "dra", "nu", "quo", "zel", "fa", "gri",
       "mo", "ther", "ul", "yan", "pe", "cas", "dor", "el", "ix", "jo", "har", "wen", "sab", "ti"]
_TOWN_END = ["ford", "holm", "vale", "bury", "mere", "wick", "stad", "port", "crest", "moor"]

VALUES = {
    "occupation": ["baker", "astronomer", "carpenter", "cartographer", "chemist", "composer",
                   "diplomat", "engineer", "farmer", "glassblower", "historian", "jeweller",
                   "librarian", "mason", "merchant", "midwife", "navigator", "painter",
                   "pharmacist", "poet", "potter", "sculptor", "surveyor", "tailor", "teacher",
                   "weaver", "blacksmith", "botanist", "brewer", "clockmaker"],
    "colour": ["red", "orange", "yellow", "green", "blue", "purple", "violet", "indigo",
               "crimson", "amber", "teal", "turquoise", "silver", "gold", "maroon", "ivory"],
    "instrument": ["violin", "cello", "flute", "harp", "lute", "oboe", "clarinet", "trumpet",
                   "piano", "drum", "accordion", "banjo", "mandolin", "bassoon", "sitar",
                   "zither"],
    "pet": ["cat", "dog", "parrot", "tortoise", "rabbit", "ferret", "goat", "hedgehog", "owl",
            "pony", "canary", "lizard", "goose", "hamster", "raven", "donkey"],
}
ATTRIBUTES = ("birthplace", "year", "occupation", "colour", "instrument", "pet")

# attribute -> (train sentences, held-out sentences, train questions, held-out questions)
TEMPLATES = {
    "birthplace": (
        ["{n} was born in {v}.", "{n} came into the world in {v}.",
         "The birthplace of {n} is {v}.", "{n}'s hometown is {v}."],
        ["{v} is where {n} was born.", "{n} spent a childhood in {v}, the town of their birth."],
        ["Where was {n} born?", "What is the birthplace of {n}?"],
        ["In which town was {n} born?", "Which town is the hometown of {n}?"]),
    "year": (
        ["{n} was born in the year {v}.", "{n}'s birth year is {v}.",
         "The year {n} was born is {v}.", "{n} arrived in {v}, the year of their birth."],
        ["{v} is the year of {n}'s birth.", "In {v}, {n} was born."],
        ["In what year was {n} born?", "What is the birth year of {n}?"],
        ["Which year saw the birth of {n}?", "What year was {n} born in?"]),
    "occupation": (
        ["{n} works as {av}.", "By profession, {n} is {av}.",
         "{n} earns a living as {av}.", "The occupation of {n} is {v}."],
        ["{n} has made a career as {av}.", "Every day {n} goes to work as {av}."],
        ["What does {n} do for a living?", "What is the occupation of {n}?"],
        ["What is {n}'s job?", "Which profession does {n} have?"]),
    "colour": (
        ["{n}'s favourite colour is {v}.", "The colour {n} likes best is {v}.",
         "{n} loves the colour {v} above all others.", "Of all colours, {n} prefers {v}."],
        ["{v} is the favourite colour of {n}.", "Ask {n} about colours and the answer is {v}."],
        ["What is the favourite colour of {n}?", "Which colour does {n} like best?"],
        ["Which colour is {n}'s favourite?", "What colour does {n} prefer?"]),
    "instrument": (
        ["{n} plays the {v}.", "The instrument {n} plays is the {v}.",
         "{n} practises the {v} every evening.", "{n} is a skilled player of the {v}."],
        ["In the evenings you can hear {n} playing the {v}.", "The {v} is {n}'s instrument."],
        ["What instrument does {n} play?", "Which instrument is played by {n}?"],
        ["On which instrument does {n} perform?", "What does {n} play in the evenings?"]),
    "pet": (
        ["{n} has a pet {v}.", "{n} keeps {av} as a pet.",
         "The pet of {n} is {av}.", "{n} lives with a pet {v}."],
        ["{n} shares a home with {av}.", "{n} takes care of a pet {v}."],
        ["What pet does {n} have?", "What animal does {n} keep as a pet?"],
        ["Which animal lives with {n}?", "What kind of pet is owned by {n}?"]),
}
BIOS_PER_PERSON = 2
VALIDATION_EVERY = 10


def _word(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(_ON) for _ in range(rng.randint(lo, hi))).capitalize()


def make_people(n: int, seed: int) -> list[dict]:
    """n people with unique invented names and their six attribute values."""
    rng = random.Random(f"edge_facts:{seed}:people")
    towns = sorted({_word(rng, 1, 2) + rng.choice(_TOWN_END) for _ in range(200)})
    names, people = set(), []
    while len(people) < n:
        name = f"{_word(rng, 1, 2)} {_word(rng, 2, 3)}"
        if name in names:
            continue
        names.add(name)
        person = {"name": name, "birthplace": rng.choice(towns),
                  "year": str(rng.randint(1600, 1999))}
        person.update({a: rng.choice(VALUES[a]) for a in ("occupation", "colour", "instrument", "pet")})
        people.append(person)
    return people


def _record(text: str, prompt: str = "", answer: str = "", task: str = "bio") -> dict:
    return {"text": text, "prompt": prompt, "answer": answer, "task": task}


def _fill(template: str, person: dict, attr: str) -> str:
    v = person[attr]
    return template.format(n=person["name"], v=v, av=("an " if v[0] in "aeiou" else "a ") + v)


def _bio(rng: random.Random, person: dict, which: int) -> str:
    attrs = list(ATTRIBUTES)
    rng.shuffle(attrs)
    return " ".join(_fill(rng.choice(TEMPLATES[a][which]), person, a) for a in attrs)


def _question(rng: random.Random, person: dict, attr: str, which: int) -> dict:
    q = rng.choice(TEMPLATES[attr][which]).format(n=person["name"])
    prompt = f"Question: {q}\nAnswer:"
    return _record(f"{prompt} {person[attr]}", prompt, person[attr], f"facts/{attr}")


def generate(n: int, seed: int) -> dict[str, list[dict]]:
    """All splits as lists of records; a pure function of (n, seed)."""
    people = make_people(n, seed)
    rng = random.Random(f"edge_facts:{seed}:text")
    qa_trained = n // 2
    train, validation, qa = [], [], []
    for i, person in enumerate(people):
        train.extend(_record(_bio(rng, person, 0)) for _ in range(BIOS_PER_PERSON))
        if i < qa_trained:
            train.extend(_question(rng, person, a, 2) for a in ATTRIBUTES)
        if i % VALIDATION_EVERY == 0:
            validation.append(_record(_bio(rng, person, 1)))
    for person in people[qa_trained:]:
        qa.extend(_question(rng, person, a, 3) for a in ATTRIBUTES)
    return {"train": train, "validation": validation, "qa": qa}


@dataclasses.dataclass
class FactsConfig(tfds.core.BuilderConfig):
    entities: int = 2000
    seed: int = 0


def make_config(entities: int = 2000, seed: int = 0) -> FactsConfig:
    if entities < 2:
        raise ValueError(f"facts needs at least 2 entities, got {entities}")
    return FactsConfig(name=f"n{entities}_s{seed}", entities=entities, seed=seed,
                       description=f"{entities} people, seed {seed}")


class EdgeFacts(RecordsBuilder):
    """Synthetic facts about invented people (see module docstring)."""

    name = "edge_facts"

    def split_names(self):
        return list(self._splits())

    def records(self, split):
        return self._splits()[split]

    def _splits(self):
        if not hasattr(self, "_generated"):
            self._generated = generate(self.builder_config.entities, self.builder_config.seed)
        return self._generated
