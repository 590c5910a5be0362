"""Engine terms fitted on measured end-to-end runs (hastune.engine_terms; written by
`hastune fidelity silicon_llama31.csv --write`, from 400 rows, sha256 3e83de44bce1f157).
Keys: (engine, GPU); clients_max is the most closed-loop clients of a run fitted on. POOLED
names, per engine, the GPU whose terms apply on GPUs it has no measurements on (its GPU with
the most rows). Fitted on that file only (docs/fidelity.md)."""

FITTED: dict[tuple[str, str], dict] = {
    ('sglang', 'h200-141gb'): {
        'kernel_scale': 0.887761,
        'iteration_s': 0.00818329,
        'per_seq_s': 7.8201e-06,
        'frontend_s': 1.00874e-06,
        'frontend_per_stream_s': 0.00286077,
        'clients_max': 512,
        'fitted_on': '46 rows of silicon_llama31.csv (sglang on h200-141gb)',
    },
    ('trtllm', 'h100-80gb'): {
        'kernel_scale': 0.913888,
        'iteration_s': 0.000353236,
        'per_seq_s': 3.28281e-05,
        'frontend_s': 1e-06,
        'frontend_per_stream_s': 0.00221834,
        'clients_max': 128,
        'fitted_on': '177 rows of silicon_llama31.csv (trtllm on h100-80gb)',
    },
    ('trtllm', 'h200-141gb'): {
        'kernel_scale': 0.807969,
        'iteration_s': 0.0,
        'per_seq_s': 1.96784e-05,
        'frontend_s': 0.033787,
        'frontend_per_stream_s': 0.000812085,
        'clients_max': 128,
        'fitted_on': '72 rows of silicon_llama31.csv (trtllm on h200-141gb)',
    },
    ('vllm', 'h100-80gb'): {
        'kernel_scale': 1.00882,
        'iteration_s': 0.0,
        'per_seq_s': 4.54417e-05,
        'frontend_s': 0.00118022,
        'frontend_per_stream_s': 0.0,
        'clients_max': 64,
        'fitted_on': '45 rows of silicon_llama31.csv (vllm on h100-80gb)',
    },
    ('vllm', 'h200-141gb'): {
        'kernel_scale': 0.993597,
        'iteration_s': 0.0,
        'per_seq_s': 8.96218e-06,
        'frontend_s': 0.0201074,
        'frontend_per_stream_s': 0.00031567,
        'clients_max': 64,
        'fitted_on': '60 rows of silicon_llama31.csv (vllm on h200-141gb)',
    },
}

POOLED: dict[str, str] = {
    'sglang': 'h200-141gb',
    'trtllm': 'h100-80gb',
    'vllm': 'h200-141gb',
}
