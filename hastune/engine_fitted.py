"""Engine terms fitted on measured end-to-end runs (hastune.engine_terms; written by
`hastune fidelity silicon_llama31.csv --write`, from 400 rows, sha256 3e83de44bce1f157).
Keys: (engine, GPU), and (engine, None) for GPUs the engine has no measurements on (the
terms of its GPU with the most rows). Fitted on that file only (see docs/fidelity.md)."""

FITTED: dict[tuple[str, str | None], dict] = {
    ('sglang', 'h200-141gb'): {
        'kernel_scale': 0.5,
        'iteration_s': 0.000633761,
        'per_seq_s': 5.5628e-05,
        'frontend_s': 0.0,
        'frontend_per_stream_s': 0.00154738,
        'fitted_on': '46 rows of silicon_llama31.csv (sglang on h200-141gb)',
    },
    ('trtllm', 'h100-80gb'): {
        'kernel_scale': 0.95902,
        'iteration_s': 0.000297461,
        'per_seq_s': 1.97555e-05,
        'frontend_s': 0.118793,
        'frontend_per_stream_s': 0.00235957,
        'fitted_on': '177 rows of silicon_llama31.csv (trtllm on h100-80gb)',
    },
    ('trtllm', 'h200-141gb'): {
        'kernel_scale': 0.761144,
        'iteration_s': 0.0,
        'per_seq_s': 0.0,
        'frontend_s': 0.0722729,
        'frontend_per_stream_s': 0.00460417,
        'fitted_on': '72 rows of silicon_llama31.csv (trtllm on h200-141gb)',
    },
    ('vllm', 'h100-80gb'): {
        'kernel_scale': 0.996663,
        'iteration_s': 0.000469478,
        'per_seq_s': 0.0,
        'frontend_s': 0.0183649,
        'frontend_per_stream_s': 0.00261792,
        'fitted_on': '45 rows of silicon_llama31.csv (vllm on h100-80gb)',
    },
    ('vllm', 'h200-141gb'): {
        'kernel_scale': 0.999341,
        'iteration_s': 0.0,
        'per_seq_s': 0.0,
        'frontend_s': 0.0299302,
        'frontend_per_stream_s': 0.00324028,
        'fitted_on': '60 rows of silicon_llama31.csv (vllm on h200-141gb)',
    },
    ('sglang', None): {
        'kernel_scale': 0.5,
        'iteration_s': 0.000633761,
        'per_seq_s': 5.5628e-05,
        'frontend_s': 0.0,
        'frontend_per_stream_s': 0.00154738,
        'fitted_on': '46 rows of silicon_llama31.csv (sglang on h200-141gb)',
    },
    ('trtllm', None): {
        'kernel_scale': 0.95902,
        'iteration_s': 0.000297461,
        'per_seq_s': 1.97555e-05,
        'frontend_s': 0.118793,
        'frontend_per_stream_s': 0.00235957,
        'fitted_on': '177 rows of silicon_llama31.csv (trtllm on h100-80gb)',
    },
    ('vllm', None): {
        'kernel_scale': 0.999341,
        'iteration_s': 0.0,
        'per_seq_s': 0.0,
        'frontend_s': 0.0299302,
        'frontend_per_stream_s': 0.00324028,
        'fitted_on': '60 rows of silicon_llama31.csv (vllm on h200-141gb)',
    },
}
