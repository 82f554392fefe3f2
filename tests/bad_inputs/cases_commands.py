"""The smaller commands and the command line itself: unknown commands and missing arguments,
`--config.*` overrides where none apply, `launch`, `compile`, `params`, `bench`, `cache`, `analyze`."""
from harness import TINY, TINY_CONFIG, Case


def _compile(*extra: str, config: str = TINY_CONFIG) -> list[str]:
    return ["compile", "--config", config, *extra]


NO_OVERRIDES = "--config.* overrides do not apply to"
CASES = [
    # the command line
    Case("command_unknown", ["trian"], "invalid choice: 'trian'"),
    Case("train_without_workdir", ["train", "--config", TINY_CONFIG],
         "the following arguments are required: --workdir"),
    Case("train_flag_unknown", ["train", "--config", TINY_CONFIG, "--workdir", "{workdir}", "--stpes", "3"],
         "unrecognized arguments: --stpes"),
    Case("overrides_on_eval", ["eval", "--workdir", "{tmp}", "--config.train.steps=3"], f"{NO_OVERRIDES} `eval`"),
    Case("overrides_on_summary", ["summary", "--config.train.steps=3"], f"{NO_OVERRIDES} `summary`"),
    Case("overrides_on_launch", ["launch", "--processes", "2", "--config.train.steps=3"], f"{NO_OVERRIDES} `launch`"),
    Case("overrides_on_analyze", ["analyze", "logit-lens", "--workdir", "{tmp}", "--out", "{tmp}/o",
                                  "--config.train.steps=3"], f"{NO_OVERRIDES} `analyze`"),
    # launch
    Case("launch_without_command", ["launch", "--processes", "2"], "needs a command after --"),
    # joining a multi-process job (the faults that need peers: tests/multihost/test_join.py)
    Case("coordinator_address_without_port", ["eval", "--workdir", "{tmp}", "--coordinator-address", "localhost",
                                              "--num-processes", "2", "--process-id", "0"],
         "--coordinator-address localhost has no port; pass host:port, e.g. localhost:12355"),
    Case("coordinator_address_port_not_a_number", ["eval", "--workdir", "{tmp}", "--coordinator-address",
                                                   "localhost:http", "--num-processes", "2", "--process-id", "1"],
         "the port 'http' is not a number in 1..65535"),
    Case("join_timeout_not_positive", ["eval", "--workdir", "{tmp}", "--join-timeout", "0"],
         "argument --join-timeout: needs a finite number > 0, got 0"),
    # params
    Case("params_config_missing", ["params", "--config", "configs/nope.py"], "config file 'configs/nope.py' not found"),
    Case("params_unknown_key", ["params", "--config", TINY_CONFIG, "--config.model.d_modle=8"],
         "did you mean 'model.d_model'"),
    Case("params_unknown_size", ["params", "--config", "configs/lm.py:size=qwen3_9b"], "unknown size 'qwen3_9b'"),
    Case("params_heads_not_multiple", ["params", "--config", TINY_CONFIG, *TINY, "--config.model.n_kv_heads=3"],
         "is not a multiple of model.n_kv_heads=3"),
    # compile
    Case("compile_unknown_topology", _compile("--topology", "v9-8"), "unknown topology 'v9-8'"),
    Case("compile_bad_mesh", _compile("--topology", "cpu:8", "--mesh", "data=x"), "--mesh 'data=x': write AXIS=SIZE"),
    Case("compile_slices_on_cpu", _compile("--topology", "cpu:8", "--slices", "2"),
         "--slices applies to TPU topologies only"),
    Case("compile_more_cpu_devices_than_present", _compile("--topology", "cpu:16"),
         "needs 16 CPU devices and this process has 8"),
    Case("compile_vocab_size_from_tokenizer", _compile("--topology", "cpu:8"),
         "model.vocab_size is 0 (taken from the tokenizer at train time); compiling needs it fixed"),
    Case("compile_mesh_not_using_devices", [*_compile("--topology", "cpu:8", "--mesh", "data=3"),
                                            "--config.model.vocab_size=512"], "does not use the 8 devices"),
    Case("compile_does_not_fit", [*_compile("--topology", "v5e-4", "--no-fix", "--batch", "65536", "--seq", "65536"),
                                  "--config.model.vocab_size=512"], "fits    no: ", code=0, slow=True),
    Case("compile_config_missing", _compile("--topology", "cpu:8", config="configs/nope.py"), "not found"),
    Case("compile_unknown_key", [*_compile("--topology", "cpu:8"), "--config.model.d_modle=8"],
         "did you mean 'model.d_model'"),
    # others
    Case("bench_unknown", ["bench", "train-stpe"], "invalid choice: 'train-stpe'"),
    Case("cache_policy_unknown", ["cache", "run", "--config", "configs/cache.py", "--workdir", "{workdir}",
                                  "--config.cache.policy=lruu"],
         "unknown cache.policy value 'lruu'; did you mean 'lru'"),
    Case("moe_calibrate_dense_workdir", ["moe", "calibrate", "--workdir", "{base}"],
         "holds a dense model (model.moe_experts=0); calibrate and trace a MoE run", base="trained"),
    Case("analyze_dir_not_a_workdir", ["analyze", "logit-lens", "--workdir", "{tmp}", "--out", "{tmp}/o"],
         "edge-jax train"),
]
