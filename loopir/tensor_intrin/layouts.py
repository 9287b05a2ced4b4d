"""Fragment layouts of ``mma.sync.m16n8k16`` and the element routing of ``ldmatrix``: the one
place where they are written down.

A warp buffer holds a tile of a warp's fragment as ``[32 lanes, L locals]``: the element
``(row, col)`` of the tile lives at ``[lane, local]``. The maps below take (and return) Python
ints or loopir expressions alike (they only use ``+``, ``*``, ``//`` and ``%``), so the same
function writes the index of a description PrimFunc, fills the CPU executor's tables and
gives the emitted store its addresses. With ``g = lane // 4`` (PTX's ``groupID``) and
``t = lane % 4`` (``threadID_in_group``), the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
floating point type") places:

============  ======  =====================================================  ==============
operand       tile    lane's element ``local``                               locals
============  ======  =====================================================  ==============
A (row)       16x16   ``(g + 8 * (v // 2 % 2), 2 * t + v % 2 + 8 * (v // 4))``  8
B (col)       16x8    ``(k, n) = (2 * t + v % 2 + 8 * (v // 2), g)``          4
C, D          16x8    ``(g + 8 * (v // 2), 2 * t + v % 2)``                    4
row stats     16x4    ``(row, copy) = (g + 8 * v, t)``                        2
============  ======  =====================================================  ==============

The 16x16 B and C layouts are two 16x8 ones side by side, the first in locals 0-3 (columns
0-7), the second in locals 4-7 (columns 8-15): what one 16x16x16 step (two ``mma.sync``, one per
half of N) uses. ``MMA_A`` is TVM's ``shared_16x16_to_ldmatrix_32x8_layout``; ``MMA_C`` is the
same map. B's tile is indexed ``(k, n)`` whichever way B is stored: the fragment of a
transposed B (stored ``[n, k]``) is the same, only ``ldmatrix`` reads it differently.

``ldmatrix`` (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lanes ``8q .. 8q + 7``
supply the addresses of the 8 rows (8 elements of 16 bits each) of matrix ``q``; lane ``l``
receives, in its elements ``2q`` and ``2q + 1``, the elements ``(l // 4, 2 * (l % 4) + h)`` of
matrix ``q`` (``h`` = 0, 1), or with ``.trans`` the elements ``(2 * (l % 4) + h, l // 4)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = [
    "FragmentLayout", "LDMATRIX_ROW", "MMA_A", "MMA_B", "MMA_B_16x8", "MMA_C", "MMA_C_16x8", "ROW_STATS",
    "SW128_ROW", "WARP_SIZE", "WARPGROUP_WARPS", "accumulator_layout", "ldmatrix_source", "sw128",
]  # fmt: skip

WARP_SIZE = 32
#: Elements of one row that a lane's ``ldmatrix`` address supplies (16 bytes of b16).
LDMATRIX_ROW = 8

Index = Any  # an int or a loopir PrimExpr
_Map = Callable[[Index, Index], tuple[Index, Index]]


@attrs.frozen
class FragmentLayout:
    """How a ``rows`` x ``cols`` tile is spread over the 32 lanes of a warp.

    Attributes
    ----------
    name
        For messages.
    rows, cols
        The tile.
    to_lane_local
        ``(row, col) -> (lane, local)``.
    to_row_col
        ``(lane, local) -> (row, col)``, its inverse.
    """

    name: str
    rows: int
    cols: int
    to_lane_local: _Map
    to_row_col: _Map

    @property
    def locals(self) -> int:
        """Elements per lane."""
        return self.rows * self.cols // WARP_SIZE

    @property
    def pairs_adjacent(self) -> bool:
        """Whether every lane's locals ``2v`` and ``2v + 1`` are neighbours in one row (column
        ``c`` and ``c + 1``, ``c`` even): a lane can then move them with one 2-element vector
        access."""
        for lane in range(WARP_SIZE):
            for v in range(0, self.locals - 1, 2):
                r0, c0 = self.to_row_col(lane, v)
                r1, c1 = self.to_row_col(lane, v + 1)
                if r1 != r0 or c1 != c0 + 1 or c0 % 2:
                    return False
        return self.locals % 2 == 0


def _a_lane_local(i: Index, j: Index) -> tuple[Index, Index]:
    return 4 * (i % 8) + j % 8 // 2, 4 * (j // 8) + 2 * (i // 8) + j % 2


def _a_row_col(lane: Index, v: Index) -> tuple[Index, Index]:
    return lane // 4 + 8 * (v // 2 % 2), 2 * (lane % 4) + v % 2 + 8 * (v // 4)


def _b_lane_local(k: Index, n: Index) -> tuple[Index, Index]:
    return 4 * (n % 8) + k % 8 // 2, 4 * (n // 8) + 2 * (k // 8) + k % 2


def _b_row_col(lane: Index, v: Index) -> tuple[Index, Index]:
    return 2 * (lane % 4) + v % 2 + 8 * (v // 2 % 2), lane // 4 + 8 * (v // 4)


def _b8_lane_local(k: Index, n: Index) -> tuple[Index, Index]:
    return 4 * n + k % 8 // 2, 2 * (k // 8) + k % 2


def _b8_row_col(lane: Index, v: Index) -> tuple[Index, Index]:
    return 2 * (lane % 4) + v % 2 + 8 * (v // 2), lane // 4


def _c8_lane_local(i: Index, j: Index) -> tuple[Index, Index]:
    return 4 * (i % 8) + j // 2, 2 * (i // 8) + j % 2


def _c8_row_col(lane: Index, v: Index) -> tuple[Index, Index]:
    return lane // 4 + 8 * (v // 2), 2 * (lane % 4) + v % 2


#: A of ``m16n8k16`` (``(m, k)``, row-major operand), 8 elements per lane.
MMA_A = FragmentLayout("A 16x16", 16, 16, _a_lane_local, _a_row_col)
#: B of two ``m16n8k16`` steps (``(k, n)``, n-halves in locals 0-3 and 4-7).
MMA_B = FragmentLayout("B 16x16", 16, 16, _b_lane_local, _b_row_col)
#: B of one ``m16n8k16`` (``(k, n)``), 4 elements per lane.
MMA_B_16x8 = FragmentLayout("B 16x8", 16, 8, _b8_lane_local, _b8_row_col)
#: C/D of two ``m16n8k16`` steps (``(m, n)``, n-halves in locals 0-3 and 4-7).
MMA_C = FragmentLayout("C 16x16", 16, 16, _a_lane_local, _a_row_col)
#: C/D of one ``m16n8k16`` (``(m, n)``), 4 elements per lane.
MMA_C_16x8 = FragmentLayout("C 16x8", 16, 8, _c8_lane_local, _c8_row_col)


def _stats_lane_local(i: Index, q: Index) -> tuple[Index, Index]:
    return 4 * (i % 8) + q, i // 8


def _stats_row_col(lane: Index, v: Index) -> tuple[Index, Index]:
    return lane // 4 + 8 * v, lane % 4


#: Quad-replicated statistics of the 16 rows of an accumulator tile (``(row, copy)``, 4 copies
#: per row, 2 elements per lane): copy ``q`` of row ``i`` is held by lane ``4 * (i % 8) + q``
#: in local ``i // 8``, so that each lane holds a copy of the two rows its C elements are in
#: (rows ``lane // 4`` and ``lane // 4 + 8``), each row by the 4 lanes of its quad.
ROW_STATS = FragmentLayout("row statistics 16x4", 16, 4, _stats_lane_local, _stats_row_col)


def accumulator_layout(cols: int) -> FragmentLayout:
    """The C layout of a 16 x ``cols`` tile (8 or 16). A warp's rows of a ``wgmma`` accumulator
    (16 x N) are N / 16 such 16 x 16 tiles, one after the other: lane ``l``'s register ``e`` of
    ``wgmma``'s ``d`` is local ``e % 8`` of tile ``e // 8`` (PTX ISA, "Register Fragments:
    Matrix D" of ``wgmma.m64nNk16``: the ``mma.m16n8k16`` C layout, repeated every 8
    columns)."""
    if cols == 8:
        return MMA_C_16x8
    if cols == 16:
        return MMA_C
    raise ValueError(f"accumulator_layout: no C fragment of 16 x {cols} (8 or 16)")


def ldmatrix_source(lane: Index, q: Index, h: Index, trans: bool) -> tuple[Index, Index]:
    """Where ``ldmatrix`` takes element ``2 * q + h`` of lane ``lane``: ``(provider, col)``,
    the lane that supplies the row's address and the column within that 8-element row."""
    row, col = (2 * (lane % 4) + h, lane // 4) if trans else (lane // 4, 2 * (lane % 4) + h)
    return LDMATRIX_ROW * q + row, col


# --- wgmma (sm_90a) ---------------------------------------------------------------------------

#: Warps of a warpgroup: ``wgmma`` is issued by 4 consecutive warps (the first one's index a
#: multiple of 4), warp ``w % 4`` holding rows ``16 * (w % 4) ..`` of the 64-row accumulator.
WARPGROUP_WARPS = 4
#: 16-bit elements in one row of the 128-byte swizzle (``SWIZZLE_128B``): a K-major ``wgmma``
#: operand tile is stored as rows of 64 elements (128 bytes), 8 rows (1024 bytes) to an atom.
SW128_ROW = 64


def sw128(row: Index, col: Index) -> Index:
    """The column where the 128-byte swizzle stores element ``(row, col)`` of a tile with rows
    of 64 16-bit elements: the 16-byte chunk ``col // 8 % 8`` XOR ``row % 8``, within the
    64-element segment of ``col``. This is how the tensor cores read a ``SWIZZLE_128B`` tile
    whose 8-row atoms start at 1024-byte boundaries (PTX: address bits [4:6] XOR bits [7:9]),
    the ``transform_layout`` map that stores a tile so, and its own inverse for a fixed row.

    ``row`` and ``col`` are ints or loopir expressions alike."""
    if isinstance(row, int) and isinstance(col, int):
        return col // 64 * 64 + (col // 8 % 8 ^ row % 8) * 8 + col % 8
    from loopir.ir import op

    return col // 64 * 64 + op.bitwise_xor(col // 8 % 8, row % 8) * 8 + col % 8
