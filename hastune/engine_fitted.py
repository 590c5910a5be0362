"""Engine terms fitted on measured end-to-end runs (hastune.engine_terms; written by
`hastune fidelity silicon_llama31.csv --write`, from 400 rows, sha256 3e83de44bce1f157).
Keys: (engine, GPU). POOLED names, per engine, the GPU whose terms apply on GPUs it has no
measurements on (its GPU with the most rows). Fitted on that file only (docs/fidelity.md)."""

FITTED: dict[tuple[str, str], dict] = {
    ('sglang', 'h200-141gb'): {
        'kernel_scale': 0.887754,
        'iteration_s': 0.0081831,
        'per_seq_s': 7.82007e-06,
        'frontend_s': 8.83433e-09,
        'frontend_per_stream_s': 0.00285998,
        'fitted_on': '46 rows of silicon_llama31.csv (sglang on h200-141gb)',
    },
    ('trtllm', 'h100-80gb'): {
        'kernel_scale': 0.915253,
        'iteration_s': 0.000388699,
        'per_seq_s': 3.24998e-05,
        'frontend_s': 0.0,
        'frontend_per_stream_s': 0.0022054,
        'fitted_on': '177 rows of silicon_llama31.csv (trtllm on h100-80gb)',
    },
    ('trtllm', 'h200-141gb'): {
        'kernel_scale': 0.770121,
        'iteration_s': 0.0,
        'per_seq_s': 3.08928e-05,
        'frontend_s': 0.0,
        'frontend_per_stream_s': 0.0,
        'fitted_on': '72 rows of silicon_llama31.csv (trtllm on h200-141gb)',
    },
    ('vllm', 'h100-80gb'): {
        'kernel_scale': 0.934167,
        'iteration_s': 0.000964027,
        'per_seq_s': 2.0269e-05,
        'frontend_s': 0.0158308,
        'frontend_per_stream_s': 0.00249054,
        'fitted_on': '45 rows of silicon_llama31.csv (vllm on h100-80gb)',
    },
    ('vllm', 'h200-141gb'): {
        'kernel_scale': 0.961513,
        'iteration_s': 0.000191752,
        'per_seq_s': 2.82519e-06,
        'frontend_s': 0.025899,
        'frontend_per_stream_s': 0.00307033,
        'fitted_on': '60 rows of silicon_llama31.csv (vllm on h200-141gb)',
    },
}

POOLED: dict[str, str] = {
    'sglang': 'h200-141gb',
    'trtllm': 'h100-80gb',
    'vllm': 'h200-141gb',
}
