"""The problem signatures shared by the offload pass, the emitter and the tuner: GEMMs and
implicit-GEMM convolutions ([`ConvProblem`][loopir.codegen_cuda.cutlass.problem.ConvProblem]).

A [`GemmProblem`][loopir.codegen_cuda.cutlass.problem.GemmProblem] describes ``D[b, i, j] =
act(alpha * sum_k A[b, i, k] * B[b, k, j] + beta * S[b, i, j] + bias[j])`` on compact row-major
buffers, in the user's coordinates. ``layout_a``/``layout_b`` say how A and B are stored: ``"row"``
is A as (M, K) and B as (K, N) (the plain NN product); ``"col"`` is A stored as (K, M) (TN) or B
stored as (N, K) (NT).

CUTLASS's generator describes kernels with a column-major output, so the emitter computes the
transposed product ``D^T = B^T A^T`` (see
[`cutlass_operands`][loopir.codegen_cuda.cutlass.problem.cutlass_operands]): a row-major D of shape
(M, N) is a column-major (N, M) matrix, and the per-column bias of D is a per-row bias there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from loopir.errors import CodegenError

__all__ = [
    "ACTIVATIONS",
    "CONV_FILTER_LAYOUTS",
    "DTYPES",
    "ConvProblem",
    "EpilogueSpec",
    "GemmProblem",
    "Problem",
    "cutlass_operands",
    "cutlass_version",
    "problem_from_signature",
]

DTYPES: dict[str, tuple[str, str, int]] = {
    "float16": ("f16", "cutlass::half_t", 2),
    "bfloat16": ("bf16", "cutlass::bfloat16_t", 2),
    "float32": ("f32", "float", 4),
}
"""loopir dtype -> (cutlass_library DataType name, C++ element type, bytes per element)"""

ACTIVATIONS: dict[str, str] = {
    "identity": "cutlass::epilogue::thread::Identity",
    "relu": "cutlass::epilogue::thread::ReLu",
    "gelu": "cutlass::epilogue::thread::GELU",
    "silu": "cutlass::epilogue::thread::SiLu",
}
"""activation name -> CUTLASS epilogue functor template (cutlass/epilogue/thread/activation.h)"""


def _check_activation(_inst: Any, _a: Any, value: str) -> None:
    if value not in ACTIVATIONS:
        raise CodegenError(
            f"cutlass: unknown epilogue activation {value!r}; known: {sorted(ACTIVATIONS)}"
        )


@attrs.frozen
class EpilogueSpec:
    """The fused epilogue ``act(alpha * acc + beta * source + bias[j])``.

    Attributes
    ----------
    activation
        ``"identity"``, ``"relu"``, ``"gelu"`` (erf form) or ``"silu"``.
    alpha, beta
        Scalars; ``beta`` is only used when ``has_source``.
    has_bias
        A bias vector over the output columns (length N) is added.
    has_source
        A source matrix shaped like D is scaled by ``beta`` and added.
    """

    activation: str = attrs.field(default="identity", validator=_check_activation)
    alpha: float = attrs.field(default=1.0, converter=float)
    beta: float = attrs.field(default=0.0, converter=float)
    has_bias: bool = False
    has_source: bool = False

    @property
    def is_plain(self) -> bool:
        """True when the epilogue is a plain linear combination (no bias, no activation)."""
        return self.activation == "identity" and not self.has_bias

    def describe(self) -> str:
        parts = []
        if self.alpha != 1.0:
            parts.append(f"alpha={self.alpha:g}")
        if self.has_source:
            parts.append(f"beta={self.beta:g}*S")
        if self.has_bias:
            parts.append("bias[j]")
        if self.activation != "identity":
            parts.append(self.activation)
        return "+".join(parts) if parts else "none"


def _signature_key(signature: dict[str, Any]) -> str:
    """A short stable hash of a problem's signature (the tuning cache's key)."""
    return hashlib.sha256(json.dumps(signature, sort_keys=True).encode()).hexdigest()[:16]


def _check_dtype(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in DTYPES:
        raise CodegenError(
            f"cutlass: {attribute.name}={value!r} is not supported; supported: {sorted(DTYPES)}"
        )


def _check_layout(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("row", "col"):
        raise CodegenError(f"cutlass: {attribute.name} must be 'row' or 'col', got {value!r}")


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CodegenError(f"cutlass: {attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class GemmProblem:
    """One GEMM as the pass found it (user coordinates, compact row-major buffers).

    Attributes
    ----------
    m, n, k, batch
        Problem extents (``batch`` is 1 for an unbatched GEMM).
    dtype_ab
        Element type of A and B (``"float16"``, ``"bfloat16"``, or ``"float32"`` for TF32).
    dtype_d
        Element type of the output D (and of the source matrix and bias).
    layout_a, layout_b
        ``"row"`` or ``"col"`` (see the module docstring).
    epilogue
        The fused epilogue.
    """

    m: int = attrs.field(validator=_positive)
    n: int = attrs.field(validator=_positive)
    k: int = attrs.field(validator=_positive)
    dtype_ab: str = attrs.field(validator=_check_dtype)
    dtype_d: str = attrs.field(validator=_check_dtype)
    layout_a: str = attrs.field(default="row", validator=_check_layout)
    layout_b: str = attrs.field(default="row", validator=_check_layout)
    batch: int = attrs.field(default=1, validator=_positive)
    epilogue: EpilogueSpec = attrs.field(factory=EpilogueSpec)
    dtype_acc: str = "float32"

    @property
    def layout_code(self) -> str:
        """``"NN"``, ``"NT"``, ``"TN"`` or ``"TT"`` in the issue's naming (A then B)."""
        return ("N" if self.layout_a == "row" else "T") + ("N" if self.layout_b == "row" else "T")

    def describe(self) -> str:
        """The layouts, for logs (as ``ConvProblem.describe``)."""
        return self.layout_code

    def signature(self) -> dict[str, Any]:
        """JSON-ready description used in cache keys and ``mod.library_calls``."""
        return {
            "m": self.m, "n": self.n, "k": self.k, "batch": self.batch,
            "dtype_ab": self.dtype_ab, "dtype_d": self.dtype_d, "dtype_acc": self.dtype_acc,
            "layout": self.layout_code,
            "epilogue": attrs.asdict(self.epilogue),
        }  # fmt: skip

    def key(self) -> str:
        """A short stable hash of
        [`signature`][loopir.codegen_cuda.cutlass.problem.GemmProblem.signature]."""
        return _signature_key(self.signature())

    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def cutlass_operands(problem: GemmProblem) -> dict[str, Any]:
    """How the user's GEMM maps onto CUTLASS's column-major-output convention.

    CUTLASS computes ``D' = A' @ B'`` with ``D' = D^T`` (N x M, column-major), ``A' = B^T``
    (N x K) and ``B' = A^T`` (K x M). Returns the CUTLASS layouts of A' and B', the extents
    (M', N') and which user extent must be a multiple of each operand's alignment.

    Returns
    -------
    dict
        ``layout_a``/``layout_b`` ("RowMajor"/"ColumnMajor" of A' and B'), ``contig_a``/
        ``contig_b``/``contig_d``: the user extent ("m", "n" or "k") that is contiguous in
        memory for A', B' and D'.
    """
    # A' = B^T: B stored (K, N) row-major is an N x K column-major matrix (contiguous along N);
    # B stored (N, K) (NT) is N x K row-major (contiguous along K).
    if problem.layout_b == "row":
        la, ca = "ColumnMajor", "n"
    else:
        la, ca = "RowMajor", "k"
    # B' = A^T: A stored (M, K) is a K x M column-major matrix (contiguous along K);
    # A stored (K, M) (TN) is K x M row-major (contiguous along M).
    if problem.layout_a == "row":
        lb, cb = "ColumnMajor", "k"
    else:
        lb, cb = "RowMajor", "m"
    return {"layout_a": la, "layout_b": lb, "contig_a": ca, "contig_b": cb, "contig_d": "n"}


def cutlass_version() -> str:
    """Version of the installed ``nvidia-cutlass`` package (part of every cache key).

    Raises
    ------
    CodegenError
        If the package is not installed.
    """
    try:
        from importlib.metadata import version

        return version("nvidia-cutlass")
    except Exception as exc:
        raise CodegenError(
            "cutlass: the nvidia-cutlass package is not installed "
            "(pip install --no-deps nvidia-cutlass==4.2.0.0)"
        ) from exc


def _int_tuple(value: Any) -> tuple[int, ...]:
    return tuple(value)


@attrs.frozen
class ConvProblem:
    """One conv2d forward propagation (fprop) as the pass found it, for an implicit-GEMM kernel.

    ``Y[n, p, q, k] = act(alpha * sum_{r,s,c} X[n, p*sh - pad_h + r*dh, q*sw - pad_w + s*dw, c]
    * W[k, r, s, c] + beta * S[n, p, q, k] + bias[k])`` with zeros outside X, on compact NHWC
    activations and a KRSC filter (``layout_w`` says how the user's filter is stored; a KCRS
    or RSCK filter is permuted to KRSC by the entry point). The bottom and right paddings follow
    from the output size (P, Q), so asymmetric paddings are described exactly.

    As an implicit GEMM it is ``M = N*P*Q``, ``N = K``, ``K = C*R*S``: the ``m``/``n``/``k``
    properties, which the cost model of
    ``enumerate`` reads as it reads a GEMM's.

    Attributes
    ----------
    batch, h, w, c
        The input's extents (NHWC).
    kout, r, s
        Output channels and filter height and width.
    p, q
        Output height and width.
    pad, stride, dilation
        ``(pad_h, pad_w)`` (top, left), ``(sh, sw)`` and ``(dh, dw)``.
    layout_w
        ``"KRSC"``, ``"KCRS"`` or ``"RSCK"``.
    dtype_ab, dtype_d, epilogue, dtype_acc
        As for [`GemmProblem`][loopir.codegen_cuda.cutlass.problem.GemmProblem].
    """

    batch: int = attrs.field(validator=_positive)
    h: int = attrs.field(validator=_positive)
    w: int = attrs.field(validator=_positive)
    c: int = attrs.field(validator=_positive)
    kout: int = attrs.field(validator=_positive)
    r: int = attrs.field(validator=_positive)
    s: int = attrs.field(validator=_positive)
    p: int = attrs.field(validator=_positive)
    q: int = attrs.field(validator=_positive)
    dtype_ab: str = attrs.field(validator=_check_dtype)
    dtype_d: str = attrs.field(validator=_check_dtype)
    pad: tuple[int, ...] = attrs.field(default=(0, 0), converter=_int_tuple)
    stride: tuple[int, ...] = attrs.field(default=(1, 1), converter=_int_tuple)
    dilation: tuple[int, ...] = attrs.field(default=(1, 1), converter=_int_tuple)
    layout_w: str = attrs.field(default="KRSC")
    epilogue: EpilogueSpec = attrs.field(factory=EpilogueSpec)
    dtype_acc: str = "float32"

    def __attrs_post_init__(self) -> None:
        if self.layout_w not in CONV_FILTER_LAYOUTS:
            raise CodegenError(
                f"cutlass: layout_w={self.layout_w!r} is not a conv filter layout; "
                f"known: {list(CONV_FILTER_LAYOUTS)}"
            )
        for name, pair, low in (("pad", self.pad, 0), ("stride", self.stride, 1),
                                ("dilation", self.dilation, 1)):  # fmt: skip
            if len(pair) != 2 or any(not isinstance(v, int) or v < low for v in pair):
                raise CodegenError(f"cutlass: conv {name} must be two ints >= {low}, got {pair!r}")

    @property
    def m(self) -> int:
        """Implicit-GEMM M: one row per output pixel (``N*P*Q``)."""
        return self.batch * self.p * self.q

    @property
    def n(self) -> int:
        """Implicit-GEMM N: the output channels."""
        return self.kout

    @property
    def k(self) -> int:
        """Implicit-GEMM K: ``C*R*S``."""
        return self.c * self.r * self.s

    def dims(self) -> tuple[int, ...]:
        """The entry point's integer arguments: N, H, W, C, K, R, S, P, Q, pad_h, pad_w, sh, sw,
        dh, dw."""
        return (self.batch, self.h, self.w, self.c, self.kout, self.r, self.s, self.p, self.q,
                *self.pad, *self.stride, *self.dilation)  # fmt: skip

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Operand shapes by role: X (NHWC), W (in ``layout_w``), Y, the source and the bias."""
        w = {"KRSC": (self.kout, self.r, self.s, self.c), "KCRS": (self.kout, self.c, self.r, self.s),
             "RSCK": (self.r, self.s, self.c, self.kout)}[self.layout_w]  # fmt: skip
        y = (self.batch, self.p, self.q, self.kout)
        return {"A": (self.batch, self.h, self.w, self.c), "B": w, "D": y, "source": y, "bias": (self.kout,)}

    def signature(self) -> dict[str, Any]:
        """JSON-ready description used in cache keys and ``mod.library_calls``."""
        return {
            "kind": "conv2d_fprop", "n": self.batch, "h": self.h, "w": self.w, "c": self.c,
            "k": self.kout, "r": self.r, "s": self.s, "p": self.p, "q": self.q,
            "pad": list(self.pad), "stride": list(self.stride), "dilation": list(self.dilation),
            "layout_w": self.layout_w, "dtype_ab": self.dtype_ab, "dtype_d": self.dtype_d,
            "dtype_acc": self.dtype_acc, "epilogue": attrs.asdict(self.epilogue),
        }  # fmt: skip

    def key(self) -> str:
        """A short stable hash of
        [`signature`][loopir.codegen_cuda.cutlass.problem.ConvProblem.signature]."""
        return _signature_key(self.signature())

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def describe(self) -> str:
        """``conv 3x3 s2 d1 64->128`` style summary for logs."""
        return (f"conv {self.r}x{self.s} s{self.stride[0]}x{self.stride[1]} "
                f"d{self.dilation[0]}x{self.dilation[1]} {self.c}->{self.kout} {self.layout_w}")  # fmt: skip


CONV_FILTER_LAYOUTS = ("KRSC", "KCRS", "RSCK")
"""Filter layouts a conv entry point takes (KRSC is CUTLASS's; the others are permuted to it)."""

Problem = GemmProblem | ConvProblem
"""What a CUTLASS entry point computes: a GEMM or an implicit-GEMM convolution."""


def problem_from_signature(sig: Any) -> Problem:
    """Rebuild a problem from its ``signature()`` (as stored in function attributes)."""
    epi = EpilogueSpec(**dict(sig["epilogue"]))
    if sig.get("kind") == "conv2d_fprop":
        return ConvProblem(
            sig["n"], sig["h"], sig["w"], sig["c"], sig["k"], sig["r"], sig["s"], sig["p"],
            sig["q"], sig["dtype_ab"], sig["dtype_d"], tuple(sig["pad"]), tuple(sig["stride"]),
            tuple(sig["dilation"]), sig["layout_w"], epi,
        )  # fmt: skip
    layout = sig["layout"]
    return GemmProblem(
        m=sig["m"], n=sig["n"], k=sig["k"], batch=sig["batch"],
        dtype_ab=sig["dtype_ab"], dtype_d=sig["dtype_d"],
        layout_a="row" if layout[0] == "N" else "col",
        layout_b="row" if layout[1] == "N" else "col",
        epilogue=epi,
    )  # fmt: skip
