"""The parameters of every kernel of kernels/*.cu, by file and kernel name: the Python side of
the launch interface, as a header is the C side. ``register`` gives each source the
declarations of its file, ``launch`` packs arguments by them (count and types checked), and
``signatures.check_declarations`` (run by tests and ``python -m flashgnn.cuda --check``) checks
them against the .cu signatures, so that a parameter moved on one side only fails on the CPU.

Types are spelled as the kernels spell them, less ``__restrict__``; T is an element type the
template's arguments choose (params.py)."""

from __future__ import annotations

from .params import KernelParams

# kernels/spmm.cu: the SPMM_PARAMS macro, the tensor-core SpMM's first parameters
SPMM_PARAMS = (
    ("col_idx", "const int*"),
    ("values", "const float*"),
    ("vec_mask", "const u8*"),
    ("seg_window", "const int*"),
    ("seg_first", "const i64*"),
    ("seg_count", "const int*"),
    ("seg_part", "const int*"),
    ("seg_split", "const int*"),
    ("split_part", "const int*"),
    ("split_count", "const int*"),
    ("workspace", "float*"),
    ("counters", "int*"),
    ("fuse_max", "int"),
    ("n_segments", "int"),
    ("seg_vectors", "int"),
    ("warps_per_segment", "int"),
    ("ways", "int"),
    ("n_rows", "int"),
    ("n", "int"),
    ("aligned", "int"),
)

# The GAT scores the edge softmax computes instead of reading (kernels/edge_softmax.cu), and the
# operands of both of its stages.
_SOFTMAX_INPUTS = (
    ("row_ptr", "const i64*"),
    ("vec_mask", "const u8*"),
    ("col_idx", "const int*"),
    ("a", "const float*"),
    ("b", "const float*"),
    ("scale", "const float*"),
    ("er", "const float*"),
    ("el", "const float*"),
    ("slope", "float"),
    ("out", "float*"),
)

# The fp32 SDDMM's two kernels (kernels/sddmm_fp32.cu) take the same arguments.
_SDDMM_FP32 = KernelParams(
    ("col_idx", "const int*"),
    ("vec_mask", "const u8*"),
    ("seg_window", "const int*"),
    ("seg_first", "const i64*"),
    ("seg_count", "const int*"),
    ("n_segments", "i64"),
    ("n_rows", "int"),
    ("kdim", "int"),
    ("k", "int"),
    ("x", "const float*"),
    ("y", "const float*"),
    ("out", "float*"),
)

DECLARED: dict[str, dict[str, KernelParams]] = {
    "blocked16.cu": {
        "spmm16": KernelParams(
            ("row_ptr", "const i64*"),
            ("col_idx", "const int*"),
            ("values", "const float*"),
            ("n_windows", "i64"),
            ("n_rows", "int"),
            ("n", "int"),
            ("aligned", "int"),
            ("x", "const u16*"),
            ("out", "T*"),
        ),
        "sddmm16": KernelParams(
            ("row_ptr", "const i64*"),
            ("col_idx", "const int*"),
            ("vec_mask", "const u16*"),
            ("n_windows", "i64"),
            ("n_rows", "int"),
            ("kdim", "int"),
            ("aligned", "int"),
            ("x", "const u16*"),
            ("y", "const u16*"),
            ("out", "float*"),
        ),
    },
    "column_sums.cu": {
        "cast_and_sum_columns": KernelParams(
            ("x", "const float*"),
            ("n_rows", "i64"),
            ("f", "int"),
            ("columns", "int"),
            ("rows_per_block", "i64"),
            ("x_out", "T*"),
            ("partial", "float*"),
            ("finished", "unsigned*"),
            ("sums", "float*"),
        ),
    },
    "edge_softmax.cu": {
        "edge_softmax_segments": KernelParams(
            *_SOFTMAX_INPUTS,
            ("seg_window", "const int*"),
            ("seg_begin", "const int*"),
            ("seg_part", "const int*"),
            ("n_segments", "i64"),
            ("seg_vectors", "int"),
            ("k_log2", "int"),
            ("part_stats", "float*"),
            ("row_info", "float4*"),
            ("row_sums", "float*"),
        ),
        "edge_softmax_finish": KernelParams(
            *_SOFTMAX_INPUTS,
            ("split_window", "const int*"),
            ("split_part", "const int*"),
            ("split_count", "const int*"),
            ("n_split", "i64"),
            ("n_parts", "i64"),
            ("seg_vectors", "int"),
            ("k_log2", "int"),
            ("part_stats", "const float*"),
            ("row_info", "float4*"),
            ("row_sums", "float*"),
            ("part_sums", "float*"),
            ("counters", "int*"),
        ),
        "gat_softmax_transposed": KernelParams(
            ("row_ptr", "const i64*"),
            ("vec_mask", "const u8*"),
            ("col_idx", "const int*"),
            ("el", "const float*"),
            ("slope", "float"),
            ("row_info", "const float4*"),
            ("out", "float*"),
            ("seg_window", "const int*"),
            ("seg_begin", "const int*"),
            ("seg_part", "const int*"),
            ("n_segments", "i64"),
            ("seg_vectors", "int"),
            ("k_log2", "int"),
        ),
    },
    "gcn_norm.cu": {
        "count_sources": KernelParams(
            ("indices", "const i64*"),
            ("nnz", "i64"),
            ("out_degree", "int*"),
        ),
        "gcn_values": KernelParams(
            ("indptr", "const i64*"),
            ("indices", "const i64*"),
            ("out_degree", "const int*"),
            ("slot", "const i64*"),
            ("weight", "const float*"),
            ("n_rows", "i64"),
            ("nnz", "i64"),
            ("power_in", "int"),
            ("power_out", "int"),
            ("out", "float*"),
        ),
    },
    "mebcrs_build.cu": {
        "mark_first": KernelParams(
            ("indptr", "const i64*"),
            ("indices", "const i64*"),
            ("first", "u8*"),
            ("n_rows", "i64"),
            ("nnz", "i64"),
        ),
        "window_starts": KernelParams(
            ("indptr", "const i64*"),
            ("offs", "const i64*"),
            ("n_rows", "i64"),
            ("n_windows", "i64"),
            ("row_ptr", "i64*"),
        ),
        "place_nonzeros": KernelParams(
            ("indptr", "const i64*"),
            ("indices", "const i64*"),
            ("offs", "const i64*"),
            ("col_idx", "int*"),
            ("vec_mask", "u8*"),
            ("perm", "i64*"),
            ("n_rows", "i64"),
            ("nnz", "i64"),
            ("k_log2", "int"),
        ),
    },
    "move_values.cu": {
        "move_values": KernelParams(
            ("values", "const T*"),
            ("src_slot", "const i64*"),
            ("dst_slot", "const i64*"),
            ("nnz", "i64"),
            ("out", "T*"),
        ),
    },
    "row_normalize.cu": {
        "normalize_rows": KernelParams(
            ("x", "const T*"),
            ("n_rows", "i64"),
            ("f", "int"),
            ("unit", "T*"),
            ("x_out", "T*"),
            ("norm", "float*"),
        ),
        "normalize_rows_backward": KernelParams(
            ("x", "const T*"),
            ("norm", "const float*"),
            ("d_unit", "const float*"),
            ("d_head", "const float*"),
            ("n_head", "i64"),
            ("n_rows", "i64"),
            ("f", "int"),
            ("d_x", "float*"),
        ),
    },
    "sample_neighbors.cu": {
        "sample_in_edges": KernelParams(
            ("indptr", "const i64*"),
            ("dst", "const i64*"),
            ("kept_end", "const i64*"),
            ("n_dst", "i64"),
            ("seed", "const i64*"),
            ("row", "i64*"),
            ("pos", "i64*"),
        ),
    },
    "score_terms.cu": {
        "score_terms": KernelParams(
            ("ft", "const T*"),
            ("attn", "const float*"),
            ("n_rows", "i64"),
            ("rows_per_head", "int"),
            ("f_dim", "int"),
            ("terms", "float*"),
        ),
        "score_terms_backward": KernelParams(
            ("ft", "const T*"),
            ("attn", "const float*"),
            ("d_terms", "const float*"),
            ("rows_per_head", "int"),
            ("f_dim", "int"),
            ("d_ft", "T*"),
            ("partial", "float*"),
        ),
    },
    "sddmm.cu": {
        "sddmm_kernel": KernelParams(
            ("col_idx", "const int*"),
            ("vec_mask", "const u8*"),
            ("seg_window", "const int*"),
            ("seg_first", "const i64*"),
            ("seg_count", "const int*"),
            ("n_segments", "i64"),
            ("seg_vectors", "int"),
            ("n_rows", "int"),
            ("kdim", "int"),
            ("k", "int"),
            ("aligned", "int"),
            ("preamble", "int"),
            ("out", "float*"),
            ("x", "const T*"),
            ("y", "const T*"),
        ),
        "gat_softmax_backward_sddmm": KernelParams(
            ("col_idx", "const int*"),
            ("vec_mask", "const u8*"),
            ("seg_window", "const int*"),
            ("seg_first", "const i64*"),
            ("seg_count", "const int*"),
            ("seg_part", "const int*"),
            ("n_segments", "i64"),
            ("seg_vectors", "int"),
            ("n_rows", "int"),
            ("kdim", "int"),
            ("aligned", "int"),
            ("x", "const T*"),
            ("y", "const T*"),
            ("el", "const float*"),
            ("records", "const float4*"),
            ("slope", "float"),
            ("rows", "float*"),
            ("parts", "float*"),
        ),
    },
    "sddmm_fp32.cu": {
        "sddmm_fp32": _SDDMM_FP32,
        "sddmm_fp32_rows": _SDDMM_FP32,
    },
    "segments.cu": {
        "segment_totals": KernelParams(
            ("row_ptr", "const i64*"),
            ("n_windows", "i64"),
            ("totals", "u64*"),
        ),
        "segment_sizes": KernelParams(
            ("row_ptr", "const i64*"),
            ("n_windows", "i64"),
            ("seg_vectors", "int"),
            ("sizes", "i64*"),
        ),
        "segment_fill": KernelParams(
            ("row_ptr", "const i64*"),
            ("scan", "const i64*"),
            ("n_windows", "i64"),
            ("n_segments", "i64"),
            ("n_split", "i64"),
            ("seg_vectors", "int"),
            ("col_idx", "const int*"),
            ("n_vectors", "i64"),
            ("table", "int*"),
            ("first", "i64*"),
            ("split_table", "int*"),
        ),
    },
    "slot_row_sums.cu": {
        "slot_row_sums": KernelParams(
            ("indptr", "const i64*"),
            ("slot", "const i64*"),
            ("values", "const float*"),
            ("n_rows", "i64"),
            ("out", "float*"),
        ),
    },
    "spmm.cu": {
        "spmm_tc": KernelParams(
            *SPMM_PARAMS,
            ("preamble", "int"),
            ("x", "const T*"),
            ("out", "T*"),
            ("gat_el", "const float*"),
            ("gat_records", "const float4*"),
            ("gat_slope", "float"),
        ),
        "spmm_reduce": KernelParams(
            ("workspace", "const float*"),
            ("split_window", "const int*"),
            ("split_part", "const int*"),
            ("split_count", "const int*"),
            ("n_split", "i64"),
            ("n_rows", "int"),
            ("n", "int"),
            ("out", "T*"),
        ),
    },
    "spmm_fp32.cu": {
        "spmm_fp32": KernelParams(
            ("row_ptr", "const i64*"),
            ("col_idx", "const int*"),
            ("vec_mask", "const u8*"),
            ("values", "const float*"),
            ("seg_window", "const int*"),
            ("seg_begin", "const int*"),
            ("seg_part", "const int*"),
            ("n_segments", "i64"),
            ("seg_vectors", "int"),
            ("k_log2", "int"),
            ("n_rows", "i64"),
            ("n", "int"),
            ("n_tiles", "int"),
            ("x", "const float*"),
            ("y", "float*"),
            ("workspace", "float*"),
        ),
    },
}

# kernels/tca.cu and kernels/gcoo.cu: TCA-SpMM on CSR and the GCOO fp32 SpMM
DECLARED["tca.cu"] = {
    "tca_spmm": KernelParams(
        ("indptr", "const i64*"),
        ("indices", "const int*"),
        ("values", "const float*"),
        ("warp_row", "const int*"),
        ("warp_rank", "const int*"),
        ("row_warps", "const int*"),
        ("n_warps", "i64"),
        ("n", "int"),
        ("x", "const T*"),
        ("out", "T*"),
    ),
}
DECLARED["gcoo.cu"] = {
    "gcoo_spmm": KernelParams(
        ("group_ptr", "const i64*"),
        ("rows", "const int*"),
        ("cols", "const int*"),
        ("values", "const float*"),
        ("seg_group", "const int*"),
        ("seg_begin", "const i64*"),
        ("seg_part", "const int*"),
        ("n_segments", "i64"),
        ("seg_nnz", "int"),
        ("n_rows", "i64"),
        ("n", "int"),
        ("n_tiles", "int"),
        ("x", "const float*"),
        ("y", "float*"),
        ("workspace", "float*"),
    ),
    "gcoo_reduce": KernelParams(
        ("workspace", "const float*"),
        ("split_group", "const int*"),
        ("split_first", "const int*"),
        ("split_count", "const int*"),
        ("n_split", "i64"),
        ("p", "int"),
        ("n_rows", "i64"),
        ("n", "int"),
        ("y", "float*"),
    ),
}

# kernels/cvse.cu: the CVSE SpMM and SDDMM (flashgnn/_cuda/cvse.py); the tensor-core kernels
# read x (and y) in the precision's storage type T, the fp32 ones float
_CVSE_PATTERN = (
    ("row_ptr", "const int*"),
    ("col_idx", "const int*"),
    ("vec_mask", "const u8*"),
)


def _cvse_spmm(x: str, out: str) -> KernelParams:
    return KernelParams(
        *_CVSE_PATTERN,
        ("values", "const float*"),
        ("n_strips", "int"),
        ("n_rows", "int"),
        ("n", "int"),
        ("aligned", "int"),
        ("x", f"const {x}*"),
        ("out", f"{out}*"),
    )


def _cvse_sddmm(x: str) -> KernelParams:
    return KernelParams(
        *_CVSE_PATTERN,
        ("n_strips", "int"),
        ("n_rows", "int"),
        ("kdim", "int"),
        ("aligned", "int"),
        ("x", f"const {x}*"),
        ("y", f"const {x}*"),
        ("out", "float*"),
    )


DECLARED["cvse.cu"] = {
    "cvse_spmm_tc": _cvse_spmm("T", "T"),
    "cvse_sddmm_tc": _cvse_sddmm("T"),
    "cvse_spmm_fp32": _cvse_spmm("float", "float"),
    "cvse_sddmm_fp32": _cvse_sddmm("float"),
}

# kernels/sparse_linear.cu
DECLARED["sparse_linear.cu"] = {
    "transpose_tokens": KernelParams(
        ("x", "const T*"),
        ("xt", "u16*"),
        ("n_tokens", "int"),
        ("n_in", "int"),
        ("tokens_pad", "int"),
    ),
    "sparse_linear_forward": KernelParams(
        ("offs", "const int*"),
        ("rows", "const int*"),
        ("frags", "const uint2*"),
        ("bias", "const float*"),
        ("xt", "const u16*"),
        ("y", "T*"),
        ("n_chunks", "int"),
        ("n_tokens", "int"),
        ("tokens_pad", "int"),
        ("n_in", "int"),
        ("n_out", "int"),
        ("vector", "int"),
    ),
    "sparse_linear_window": KernelParams(
        ("offs", "const int*"),
        ("steps", "const uint4*"),
        ("bias", "const float*"),
        ("x", "const u16*"),
        ("y", "void*"),
        ("out_type", "int"),
        ("n_groups", "int"),
        ("n_chunks", "int"),
        ("chunk_rows", "int"),
        ("cap", "int"),
        ("n_tokens", "int"),
        ("x_stride", "int"),
        ("n_in", "int"),
        ("n_out", "int"),
        ("vector", "int"),
        ("aligned", "int"),
    ),
}

# kernels/hbell.cu: HB-ELL's dense blocks (flashgnn/_cuda/hbell.py)
DECLARED["hbell.cu"] = {
    "spmm_dense": KernelParams(
        ("dense_ptr", "const i64*"),
        ("dense_col", "const int*"),
        ("dense_val", "const i64*"),
        ("values", "const float*"),
        ("base", "const float*"),
        ("n_brows", "i64"),
        ("n_rows", "int"),
        ("n_cols", "int"),
        ("n", "int"),
        ("aligned", "int"),
        ("x", "const T*"),
        ("out", "T*"),
    ),
    "spmm_dense_fp32": KernelParams(
        ("dense_ptr", "const i64*"),
        ("dense_col", "const int*"),
        ("dense_val", "const i64*"),
        ("values", "const float*"),
        ("base", "const float*"),
        ("n_rows", "i64"),
        ("n_cols", "int"),
        ("n", "int"),
        ("x", "const float*"),
        ("out", "float*"),
    ),
}

# kernels/epilogue.cu: a graph convolution's epilogue and its backward (flashgnn/_cuda/epilogue.py)
_EPILOGUE_MASK = (
    ("relu", "int"),
    ("threshold", "unsigned"),
    ("scale", "float"),
    ("key", "const i64*"),
    ("stream", "unsigned"),
)
DECLARED["epilogue.cu"] = {
    "epilogue_forward": KernelParams(
        ("y", "const T*"),
        ("n_rows", "i64"),
        ("columns", "int"),
        ("bias", "const float*"),
        *_EPILOGUE_MASK,
        ("out", "T*"),
    ),
    "epilogue_backward": KernelParams(
        ("grad", "const T*"),
        ("out", "const T*"),
        ("n_rows", "i64"),
        ("columns", "int"),
        *_EPILOGUE_MASK,
        ("grad_in", "T*"),
    ),
}

# kernels/spmm_hybrid.cu: the hybrid SpMM's sparse windows on CUDA cores (flashgnn/_cuda/hybrid.py)
DECLARED["spmm_hybrid.cu"] = {
    "spmm_sparse_windows": KernelParams(
        *list(DECLARED["spmm_fp32.cu"]["spmm_fp32"])[:13],  # the same but for x and y
        ("x", "const T*"),
        ("y", "T*"),
        ("workspace", "float*"),
    ),
}

# kernels/agnn_one_pass.cu: AGNN's one-pass attention forward (flashgnn/_cuda/agnn_one_pass.py)
DECLARED["agnn_one_pass.cu"] = {
    "agnn_one_pass": KernelParams(
        ("col_idx", "const int*"),
        ("vec_mask", "const u8*"),
        ("seg_window", "const int*"),
        ("seg_first", "const i64*"),
        ("seg_count", "const int*"),
        ("seg_part", "const int*"),
        ("n_segments", "i64"),
        ("n_rows", "int"),
        ("n_features", "int"),
        ("unit_dst", "const T*"),
        ("unit", "const T*"),
        ("x", "const T*"),
        ("beta", "const float*"),
        ("out", "T*"),
        ("row_max", "float*"),
        ("row_sum", "float*"),
        ("workspace", "float*"),
        ("part_stats", "float*"),
    ),
    "agnn_one_pass_combine": KernelParams(
        ("workspace", "const float*"),
        ("part_stats", "const float*"),
        ("split_window", "const int*"),
        ("split_part", "const int*"),
        ("split_count", "const int*"),
        ("n_split", "i64"),
        ("n_rows", "int"),
        ("n_features", "int"),
        ("out", "T*"),
        ("row_max", "float*"),
        ("row_sum", "float*"),
    ),
}
