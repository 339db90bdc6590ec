"""The typed kernel interface, on the CPU: every ``__global__`` signature of kernels/*.cu against
its Python declaration (flashgnn/_cuda/declarations.py), the checker's reports when the two
differ, and the launch packing that refuses arguments that do not fit the declaration."""

from __future__ import annotations

import ctypes
import struct

import pytest

from flashgnn._cuda import runtime, sources, spmm_fp32
from flashgnn._cuda.check import load_all_sources
from flashgnn._cuda.declarations import DECLARED, SPMM_PARAMS
from flashgnn._cuda.params import MAX_PARAMS, KernelParams
from flashgnn._cuda.signatures import check_declarations, differences, kernel_signatures
from flashgnn._cuda.sources import SOURCES, KernelSource, kernel_dir, register


def declared_with(file: str, kernel: str, params: KernelParams) -> dict:
    """DECLARED with one kernel's declaration replaced (DECLARED itself untouched)."""
    copy = {f: dict(kernels) for f, kernels in DECLARED.items()}
    copy[file][kernel] = params
    return copy


def edited(params: KernelParams, i: int, j: int | None = None, drop: bool = False) -> KernelParams:
    """``params`` with entries i and j swapped, or entry i dropped."""
    entries = list(params)
    if drop:
        del entries[i]
    else:
        entries[i], entries[j] = entries[j], entries[i]
    return KernelParams(*entries)


# ---------------------------------------------------------------------------- signatures
def test_every_kernel_signature_matches_its_declaration():
    problems = check_declarations(kernel_dir(), DECLARED)
    assert not problems, "\n".join(problems)


def test_every_registered_instantiation_has_its_kernels_declaration():
    load_all_sources()
    assert set(SOURCES) == {path.name for path in kernel_dir().glob("*.cu")}
    for src in SOURCES.values():
        assert set(src.params) == set(src.name_expressions), src.file
        for expression, params in src.params.items():
            kernel = expression.split("<")[0].rsplit("::")[-1]
            assert params is DECLARED[src.file][kernel]


def test_the_spmm_signature_is_read_through_its_macro():
    """spmm_tc's first parameters are the SPMM_PARAMS macro of kernels/spmm.cu, expanded."""
    actual = kernel_signatures((kernel_dir() / "spmm.cu").read_text())["spmm_tc"]
    assert actual[: len(SPMM_PARAMS)] == list(SPMM_PARAMS)
    assert len(actual) == len(SPMM_PARAMS) + 6 and actual[-1] == ("gat_slope", "float")


def test_the_hybrid_kernel_takes_the_fp32_spmms_parameters_but_typed_x_and_y():
    """spmm_sparse_windows (kernels/spmm_hybrid.cu) shares spmm_fp32's body, so its parameters
    are spmm_fp32's, with x and y in the launch's storage and output types, and the instances
    its launcher names are registered."""
    read = lambda f: kernel_signatures((kernel_dir() / f).read_text())  # noqa: E731
    hybrid = read("spmm_hybrid.cu")["spmm_sparse_windows"]
    fp32 = read("spmm_fp32.cu")["spmm_fp32"]
    assert hybrid[:13] == fp32[:13] and hybrid[15:] == fp32[15:] == [("workspace", "float*")]
    assert hybrid[13:15] == [("x", "const T*"), ("y", "T*")]
    assert list(DECLARED["spmm_hybrid.cu"]["spmm_sparse_windows"]) == hybrid
    names = spmm_fp32.HYBRID_SOURCE.name_expressions
    for precision, (_, tags) in spmm_fp32.HYBRID_OUTPUTS.items():
        for dtype in tags:
            for variant in spmm_fp32.VARIANTS:
                assert spmm_fp32._sparse_windows_kernel(4, 32, variant, precision, dtype) in names
            assert (
                spmm_fp32._sparse_windows_kernel(1, 8, spmm_fp32.REGISTERS, precision, dtype)
                in names
            )


def test_swapped_declaration_entries_are_reported():
    """Two int parameters of the SpMM swapped in a copy of its declaration (the kind of mistake
    no type check sees): the checker names both positions."""
    spmm = DECLARED["spmm.cu"]["spmm_tc"]
    names = [name for name, _ in spmm]
    i, j = names.index("n_rows"), names.index("n")
    swapped = declared_with("spmm.cu", "spmm_tc", edited(spmm, i, j))
    problems = check_declarations(kernel_dir(), swapped)
    assert problems == [
        f"spmm.cu: spmm_tc: parameter {i} is declared n: int, the kernel has n_rows: int",
        f"spmm.cu: spmm_tc: parameter {j} is declared n_rows: int, the kernel has n: int",
    ]


def test_dropped_retyped_and_unknown_declarations_are_reported():
    fill = DECLARED["segments.cu"]["segment_fill"]
    last = len(fill) - 1
    dropped = declared_with("segments.cu", "segment_fill", edited(fill, last, drop=True))
    assert check_declarations(kernel_dir(), dropped) == [
        f"segments.cu: segment_fill: parameter {last} is declared nothing, "
        "the kernel has split_table: int*",
        f"segments.cu: segment_fill: {last} parameters declared, the kernel has {len(fill)}",
    ]
    retyped = KernelParams(
        *[(name, "int" if name == "n_windows" else ctype) for name, ctype in fill]
    )
    retyped = declared_with("segments.cu", "segment_fill", retyped)
    assert check_declarations(kernel_dir(), retyped) == [
        "segments.cu: segment_fill: parameter 2 is declared n_windows: int, "
        "the kernel has n_windows: i64"
    ]
    extra = declared_with("segments.cu", "segment_gone", fill)
    assert check_declarations(kernel_dir(), extra) == [
        "segments.cu: segment_gone is declared, but the file has no such kernel"
    ]
    undeclared = {f: dict(kernels) for f, kernels in DECLARED.items()}
    del undeclared["gcn_norm.cu"]["count_sources"]
    assert check_declarations(kernel_dir(), undeclared) == [
        "gcn_norm.cu: kernel count_sources has no declaration"
    ]


def test_signature_reader_sees_templates_restrict_macros_and_launch_bounds():
    text = """
        #define HEAD const int *idx, /* a comment */ float *acc
        template <int P, typename Tag, class Bits>
        __global__ void __launch_bounds__(32 * WARPS, min_blocks(P, 2))
            first(HEAD, const typename Tag::T* __restrict__ x, Bits* out,  // the output
                  const typename Chunk<P, 4>::T* __restrict__ y, i64 n, float slope) {
            wait_for_previous_kernel();
        }
        __global__ void second(unsigned* __restrict__ done, bool flag) {}
    """
    assert kernel_signatures(text) == {
        "first": [
            ("idx", "const int*"),
            ("acc", "float*"),
            ("x", "const T*"),
            ("out", "T*"),
            ("y", "const T*"),
            ("n", "i64"),
            ("slope", "float"),
        ],
        "second": [("done", "unsigned*"), ("flag", "bool")],
    }
    assert (
        differences(
            "second",
            KernelParams(("done", "unsigned*"), ("flag", "bool")),
            kernel_signatures(text)["second"],
        )
        == []
    )


def test_an_instantiation_without_a_declaration_fails_to_register():
    before = dict(SOURCES)
    with pytest.raises(ValueError, match=r"gcn_norm\.cu: fg::gcn_nothing has no declared"):
        register("gcn_norm.cu", ["fg::count_sources", "fg::gcn_nothing"])
    assert SOURCES == before


def test_a_file_without_declarations_is_declared_by_its_text(tmp_path, monkeypatch):
    """A benchmark's own kernels (a file declarations.py does not know) launch by the signature
    the reader sees in their text, header macros expanded."""
    (tmp_path / "extra.cuh").write_text("#define EXTRA_HEAD const int* idx, i64 n\n")
    (tmp_path / "own.cu").write_text(
        "namespace bench {\ntemplate <int V>\n__global__ void floor(EXTRA_HEAD, float* out) {}\n}\n"
    )
    monkeypatch.setattr(sources, "kernel_dir", lambda: tmp_path)
    own = KernelSource("own.cu", ("bench::floor<32>",))
    assert own.params["bench::floor<32>"].params == (
        ("idx", "const int*"),
        ("n", "i64"),
        ("out", "float*"),
    )


# ---------------------------------------------------------------------------- packing
EVERY_TYPE = KernelParams(
    ("p", "const float*"),
    ("i", "int"),
    ("q", "i64"),
    ("u", "unsigned"),
    ("f", "float"),
    ("b", "bool"),
    ("t", "T*"),
)


def test_each_argument_fills_the_low_bytes_of_its_slot_as_before():
    """What the driver reads of each 8-byte slot (the parameter's size) is what the untyped
    packing gave: integers little-endian, a float32's bits, a bool's byte."""
    args = (0x7F12_3456_7890, -5, -(1 << 40), 0xFFFF_FFF0, 0.2, True, 0)
    packed = EVERY_TYPE.struct.pack(*args)
    assert len(packed) == 8 * len(EVERY_TYPE)
    sizes = (8, 4, 8, 4, 4, 1, 8)
    untyped = [struct.pack("<q", a) for a in args[:4]]
    untyped += [struct.pack("<f", 0.2), b"\x01", struct.pack("<q", 0)]
    for i, (size, old) in enumerate(zip(sizes, untyped)):
        assert packed[8 * i : 8 * i + size] == old[:size], EVERY_TYPE.params[i]


def test_float_arguments_are_packed_as_their_float32_bits():
    """A float scalar travels in the low half of its 8-byte slot, as a kernel's float parameter
    reads it."""
    params = KernelParams(("slope", "float"))
    for x in (0.2, -1.5, 0.0, float("inf")):
        slot = params.struct.pack(x)
        assert slot[:4] == struct.pack("<f", x)


def test_every_declaration_packs_one_slot_per_parameter():
    for kernels in DECLARED.values():
        for params in kernels.values():
            assert params.struct.size == 8 * len(params) and len(params) <= MAX_PARAMS


def launch_packing(params: KernelParams, args: tuple) -> bytes:
    """The bytes a launch hands the driver for ``args``, read back through its slot array."""
    parameters = runtime._Parameters()
    address = parameters.packed("fg::test<1>", params, args)
    slots = (ctypes.c_void_p * len(params)).from_address(address)
    return b"".join(ctypes.string_at(slots[i], 8) for i in range(len(params)))


def test_launch_packs_into_slots_the_driver_reads_in_order():
    args = (1 << 40, -5, 7, 3, 0.5, False, 64)
    assert launch_packing(EVERY_TYPE, args) == EVERY_TYPE.struct.pack(*args)


@pytest.mark.parametrize(
    "args,message",
    [
        ((16, 1.5, 7, 3, 0.5, False, 64), r"argument 1 \(i: int\) cannot be 1\.5"),
        ((16, 1 << 31, 7, 3, 0.5, False, 64), r"argument 1 \(i: int\) cannot be 2147483648"),
        ((-16, 1, 7, 3, 0.5, False, 64), r"argument 0 \(p: const float\*\) cannot be -16"),
        ((16, 1, 7, -3, 0.5, False, 64), r"argument 3 \(u: unsigned\) cannot be -3"),
        ((16, 1, 7, 3, 1e300, False, 64), r"argument 4 \(f: float\) cannot be 1e\+300"),
        ((16, 1, 7, 3, 0.5, False), r"takes 7 arguments, got 6"),
        ((16, 1, 7, 3, 0.5, False, 64, 9), r"takes 7 arguments, got 8"),
    ],
)
def test_launch_refuses_arguments_that_do_not_fit_the_declaration(args, message):
    with pytest.raises(ValueError, match=message) as error:
        launch_packing(EVERY_TYPE, args)
    text = str(error.value)
    assert "launching fg::test<1>" in text and "(p: const float*, i: int, q: i64" in text
    assert f"the arguments were {args}" in text


def test_declarations_refuse_unknown_types_and_repeated_names():
    with pytest.raises(ValueError, match="unknown kernel parameter type 'double'"):
        KernelParams(("x", "double"))
    with pytest.raises(ValueError, match="distinct identifiers"):
        KernelParams(("x", "int"), ("x", "float*"))
    with pytest.raises(ValueError, match=f"at most {MAX_PARAMS}"):
        KernelParams(*[(f"a{i}", "int") for i in range(MAX_PARAMS + 1)])
