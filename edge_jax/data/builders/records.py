"""A base for builders whose examples are question records: text, prompt, answer, task."""
from __future__ import annotations

import tensorflow_datasets as tfds
from tensorflow_datasets.core import registered

QA_FIELDS = ("text", "prompt", "answer", "task")

with registered.skip_registration():  # a base class, not a dataset of its own

    class RecordsBuilder(tfds.core.GeneratorBasedBuilder):
        """Subclasses set ``name`` and BUILDER_CONFIGS and implement ``records(split)``/``split_names()``."""

        VERSION = tfds.core.Version("1.0.0")
        RELEASE_NOTES = {"1.0.0": "First release."}

        def _info(self) -> tfds.core.DatasetInfo:
            return tfds.core.DatasetInfo(
                builder=self,
                description=type(self).__doc__,
                features=tfds.features.FeaturesDict({k: tfds.features.Text() for k in QA_FIELDS}),
                disable_shuffling=True,
            )

        def split_names(self) -> list[str]:
            raise NotImplementedError

        def records(self, split: str):
            raise NotImplementedError

        def _split_generators(self, dl_manager):
            del dl_manager
            return {split: self._generate_examples(split) for split in self.split_names()}

        def _generate_examples(self, split):
            for i, record in enumerate(self.records(split)):
                yield i, record
