"""Zero-shot and few-shot evaluation in lm-evaluation-harness's terms: tasks (:mod:`.tasks`; the ten
MeKi benchmarks in :mod:`.benchmarks`, built-in stand-ins in :mod:`.builtin`), the log-likelihood
scorer (:mod:`.scorer`) and the runner that aggregates and writes results (:mod:`.suite`)."""
