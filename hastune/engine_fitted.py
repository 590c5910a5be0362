"""Engine terms fitted on measured end-to-end runs (hastune.engine_terms; written by
`hastune fidelity silicon_llama31.csv --write`, from 400 rows, sha256 3e83de44bce1f157).
Keys: (engine, GPU). POOLED names, per engine, the GPU whose terms apply on GPUs it has no
measurements on (its GPU with the most rows). Fitted on that file only (docs/fidelity.md)."""

FITTED: dict[tuple[str, str], dict] = {
    ('sglang', 'h200-141gb'): {
        'kernel_scale': 0.949989,
        'iteration_s': 0.00312954,
        'per_seq_s': 1.83537e-05,
        'frontend_s': 0.0,
        'frontend_per_stream_s': 0.00181139,
        'fitted_on': '46 rows of silicon_llama31.csv (sglang on h200-141gb)',
    },
    ('trtllm', 'h100-80gb'): {
        'kernel_scale': 0.92479,
        'iteration_s': 0.00066643,
        'per_seq_s': 3.68821e-05,
        'frontend_s': 0.133641,
        'frontend_per_stream_s': 0.000146029,
        'fitted_on': '177 rows of silicon_llama31.csv (trtllm on h100-80gb)',
    },
    ('trtllm', 'h200-141gb'): {
        'kernel_scale': 0.753773,
        'iteration_s': 0.0,
        'per_seq_s': 3.83469e-06,
        'frontend_s': 0.0870442,
        'frontend_per_stream_s': 0.00313637,
        'fitted_on': '72 rows of silicon_llama31.csv (trtllm on h200-141gb)',
    },
    ('vllm', 'h100-80gb'): {
        'kernel_scale': 0.936448,
        'iteration_s': 0.000936221,
        'per_seq_s': 2.55736e-05,
        'frontend_s': 0.0175121,
        'frontend_per_stream_s': 0.00252092,
        'fitted_on': '45 rows of silicon_llama31.csv (vllm on h100-80gb)',
    },
    ('vllm', 'h200-141gb'): {
        'kernel_scale': 0.956986,
        'iteration_s': 0.000342274,
        'per_seq_s': 0.0,
        'frontend_s': 0.0289429,
        'frontend_per_stream_s': 0.00314071,
        'fitted_on': '60 rows of silicon_llama31.csv (vllm on h200-141gb)',
    },
}

POOLED: dict[str, str] = {
    'sglang': 'h200-141gb',
    'trtllm': 'h100-80gb',
    'vllm': 'h200-141gb',
}
