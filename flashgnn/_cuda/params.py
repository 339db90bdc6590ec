"""A kernel's parameters declared in Python: names and C types, in the kernel's order, compiled
once into the ``struct.Struct`` that packs a launch's arguments into 8-byte slots.

The packing itself checks the arguments: a wrong count, a float for an integer, or an integer
out of its C type's range raises (``KernelParams.mismatch`` turns that into a clear error),
where positional slots of one integer type would pass them to the kernel as wrong memory."""

from __future__ import annotations

import re
import struct

# Per C scalar type, the struct code of its 8-byte slot: the value, then padding. The driver reads
# as many bytes from a slot as the parameter has (little-endian: the value's bytes come first).
SCALAR_CODES = {
    "int": "i4x",
    "unsigned": "I4x",
    "i64": "q",
    "float": "f4x",
    "bool": "?7x",
}
# A pointer is a device address (0: null): unsigned, so a negative integer is refused.
POINTER_CODE = "Q"
# Arguments a kernel takes at most: the size of each thread's slot buffer (runtime._Parameters).
MAX_PARAMS = 64
# "T" stands for an element type that the template's arguments choose (``typename Tag::T``, a
# template type parameter): what the kernel reads there is the launcher's to match.
_POINTER = re.compile(r"(const )?(T|[A-Za-z_]\w*)\*")
_NAME = re.compile(r"[A-Za-z_]\w*")


def slot_code(ctype: str) -> str:
    """The struct code of a parameter of C type ``ctype`` (a name of SCALAR_CODES, or a pointer
    spelled ``[const ]type*``)."""
    if ctype in SCALAR_CODES:
        return SCALAR_CODES[ctype]
    if _POINTER.fullmatch(ctype):
        return POINTER_CODE
    raise ValueError(
        f"unknown kernel parameter type {ctype!r}: a pointer ('[const ]type*') or "
        f"one of {', '.join(SCALAR_CODES)}"
    )


class KernelParams:
    """The parameters of a kernel, and of every instantiation of its template: ``(name, C type)``
    pairs in the order of the kernel's signature. ``struct`` packs a launch's arguments."""

    __slots__ = ("params", "struct")

    def __init__(self, *params: tuple[str, str]):
        names = [name for name, _ in params]
        bad = [name for name in names if not _NAME.fullmatch(name)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"kernel parameter names must be distinct identifiers, got {names}")
        if len(params) > MAX_PARAMS:
            raise ValueError(
                f"a kernel takes at most {MAX_PARAMS} parameters here, got {len(params)}"
            )
        self.params = tuple((name, ctype) for name, ctype in params)
        self.struct = struct.Struct("<" + "".join(slot_code(ctype) for _, ctype in params))

    def __len__(self) -> int:
        return len(self.params)

    def __iter__(self):
        return iter(self.params)

    def __repr__(self) -> str:
        return f"KernelParams({', '.join(f'{name}: {ctype}' for name, ctype in self.params)})"

    def mismatch(self, kernel: str, args: tuple, error: Exception) -> ValueError:
        """The error of launching ``kernel`` with ``args``, which ``struct`` refused with ``error``:
        the first argument that does not fit its parameter, or the counts."""
        declared = ", ".join(f"{name}: {ctype}" for name, ctype in self.params)
        if len(args) != len(self.params):
            what = f"takes {len(self.params)} arguments, got {len(args)}"
        else:
            what = str(error)
            for i, ((name, ctype), arg) in enumerate(zip(self.params, args)):
                try:
                    struct.pack("<" + slot_code(ctype), arg)
                except (struct.error, OverflowError) as e:
                    what = f"argument {i} ({name}: {ctype}) cannot be {arg!r}: {e}"
                    break
        return ValueError(
            f"flashgnn: launching {kernel}: {what}; its parameters are ({declared}), "
            f"the arguments were {args}"
        )
