"""Generate docs/local_padding.md from the real code.

Run ``python tests/passes/_passes_docgen.py > docs/local_padding.md`` after changing the pass
(test_docs.py fails while the page is stale).
"""

from __future__ import annotations

import loopir
from loopir.passes import (
    CompactBufferAllocation,
    LocalPadding,
    LowerBlocks,
    PassContext,
    Sequential,
    UnifyThreadLoops,
)

INTRO = '''\
# Local padding (`tir.enable_local_pad`)

Local padding is an opt-in pass of `loopir.lower`, proposed by DietCode (MLSys 2022; apache/tvm
PR 11793, never merged). After imperfect tiling, the shared/local fetches, the compute on the
local tiles and the write-back of a GPU kernel all carry bound guards. Local padding keeps a
guard only where it protects a store, and makes the rest of the tile computable unguarded by
filling the out-of-range elements with a *pad value*, the identity of the reduction that
consumes them.

```python
import loopir

sch = loopir.examples.dense(960, 770, 2304)          # the DietCode dense schedule
with loopir.PassContext(config={{"tir.enable_local_pad": True}}):
    lowered = loopir.lower(sch.func)
```

With the key unset or False the pipeline does not run the pass at all: the output is
structurally identical to a pipeline without it.

## What the pass does

- **Candidates** are guarded stores to `shared`/`local` buffers: *fetches* (a value loaded
  from another buffer), *inits* (a constant) and *computes* (reduction updates
  `D[i] = D[i] + e`, `max`, `min`). Stores to `global` (write-backs) keep their guards.
- The guard is split into its **top-level conjuncts** (nested `&&` and nested `if`s
  flattened). `||`, `!`, `==`, `!=`, calls and conjuncts that load from memory are atomic:
  never split inside, never dropped.
- **Fetch / init.** A conjunct is *non-inlineable* when the store needs it: without it the
  store index could leave the destination buffer, or two iterations of one round (the loops
  inside the buffer's allocation scope, plus the threads that share a shared buffer) could write
  the same element, so that a pad value could overwrite a real one. This is decided by proof:
  exhaustively over the iteration domain when it is small and constant (at most 2^18 points,
  every tile loop in practice), otherwise with the `loopir.arith` analyzer; anything unproven
  counts as needed. Every other conjunct only protects the source read and is *inlined*: the
  stored value becomes `Select(inlined conjuncts, value, pad)` and the guard keeps only the
  non-inlineable conjuncts. The elements padding newly writes are exactly those the original
  left unwritten. When the tile outlives a round (the shared tiles are reused by every `k0`
  iteration), an element left unwritten could still hold the previous round's value, so every
  reader's own guard must also imply each inlined conjunct at the element it reads; otherwise
  the fetch is refused. When that predicate depends on the round (`k0 * 4 + kk < 770`), it
  describes this round's write only, so the fetch must also have written the element in the
  reader's round, before the reader. A tile read in an index or a guard is refused: a pad
  there would move an access, not add an identity.
- **Init.** Its guard goes only if every writer of another value (the reduction) runs after
  all of the init's iterations (later in program order, in no shared loop inside the
  allocation), or provably never writes an element the padded init newly writes; otherwise a
  re-init after the reduction (`acc[i] = 0; acc[i] += x; if i < 1: acc[i] = 0`) would
  overwrite its result.
- **Pad value** = identity of the consuming reduction: 0 for sum, -inf (floats) / lowest (ints)
  for max, +inf / highest for min. It must be unique, and for a fetch every consumer must let
  the padded value flow in as that identity: a factor of the summed product, or the whole term
  of a max/min (`max(acc, a * b)` with a -inf operand is refused), through casts that each map
  the identity of their operand type to the identity of their own type. A sum's 0 survives
  every integer or float cast and a float max's -inf every float cast, but
  `max(acc, int32(int8(x)))` is refused: `int8(INT32_MIN)` is 0, so the pad would win over
  negative data; so is an int8 tile under an int32 max (its pad -128 is not INT32_MIN). The
  report names the cast and the values.
- **Compute.** A conjunct of a compute guard is dropped only when (1) the store stays in
  bounds without it, (2) whenever it is false some operand reads a padded element: the fetch's
  inlined conjunct, moved from the source index to the operand's tile element, implies it
  (proved with the analyzer), (3) the fetch writes every element the compute may read, before
  it in the same round (and in no loop the two share inside the round), and (4) every other
  operand is padded too or an in-bounds read of a function parameter (an intermediate
  allocated in the function may be unwritten at that index). The update then adds the
  identity, so it is a no-op, provided (5) everything the store evaluates where the conjunct
  is false is defined and finite: no division or modulo by something that can be zero there,
  no call outside its domain (`sqrt`, `log`) or that can overflow (`exp`, `pow`), no cast
  that can overflow (float to int, to a narrower float). `A[i, k] * (1 / (K - k))` is
  `0 * inf = NaN` at the padded `k == K`, and `A[i, k] * (60 // (K - k))` divides by zero
  there, so their k conjunct is kept. Each such node is proven on its own: exhaustively over
  the padded iterations when it only depends on loops of constant range (evaluated with numpy
  in its own type; the report names an iteration where it fails), otherwise structurally (a
  nonzero constant divisor, an integer divisor the analyzer bounds away from zero, a call
  finite on finite input); each branch of a `Select`, `&&` or `||` only where it is taken. A
  max/min term is the padded load itself, so only its indices are checked.
- **Refused** (left unchanged, every conjunct listed as kept with its reason): values with
  side effects, stores in an else-branch, no single identity, consumers that are not a
  recognized reduction, a cast that changes the identity ("the padded value would not reach
  the max reduction as its identity (the cast to int8 turns the max pad -2147483648 of int32
  into 0, not the int8 identity -128)"), tiles read as an index, non-constant or conflicting
  init values, inits that could overwrite a result. A compute conjunct stays, with the
  reason, when the store would evaluate something undefined there ("where it is false,
  60 // (7 - (k_0 * 4 + k_1)) divides by zero (at k_0 = 1, k_1 = 3)", "cannot prove the
  divisor B[i] of ... nonzero"). Only padded candidates show a pad value.

Soundness notes: both backends evaluate `Select` lazily (C/CUDA `?:`), so the guarded
out-of-range source load is never performed. Dropping a compute guard relies on `0 * x == 0`
for the other operands, which rule (5) proves finite except for two assumptions (the ones
DietCode makes): loaded data is finite, and `+`, `-`, `*` of finite values stay finite (the
unpadded kernel's own arithmetic); an `inf` in the *real* data of an operand multiplied with a
padded zero would give NaN in an element the original never computed with that term.

`LocalPadding(explain=True)` logs a report of every candidate (at INFO; it is always logged at
DEBUG under `loopir.passes.local_pad`); the report of the last run is `pass_.report`.

## The dense example, 960 x 770 x 2304

The schedule tiles i by 128, j by 128, k by 4 (256 threads, 2 virtual threads); 960 is not a
multiple of 128 (7.5 tiles) and 770 is not a multiple of 4, and the cooperative fetch of a
128 x 4 tile by 256 threads x 4 lanes covers 1024 > 512 elements, so it has a coverage guard.

### Lowered without local padding

```python
{off}
```

### Lowered with `tir.enable_local_pad`

```python
{on}
```

The A/B fetch guards reduce to the coverage guard that protects the shared store, the loaded
value is `Select(row < 960 && k < 770, A[..], 0)`, the init and the compute are unguarded, and
the write-back keeps its row guard.

### Explain report

```text
{report}
```

## 100 x 770 x 2304 (extent smaller than the tile)

For M = 100 the schedule clips the shared A tile to 100 rows, so the row guard now protects
the A store; since the fetch no longer covers rows 100..127 the compute keeps its row guard,
while the k guard still goes:

```text
{report100}
```

## Where it runs in the pipeline

`loopir.lower` runs LowerCrossThreadReduction, LowerBlocks, UnifyThreadLoops, CompactBufferAllocation, then LocalPadding
(only with the key on), Simplify and ThreadSync. Local padding needs the compacted buffer shapes
(a guard protects a store exactly when the tile would overflow without it), which is why it runs
after compaction.
'''


def _report(M: int, K: int, N: int) -> str:
    sch = loopir.examples.dense(M, K, N)
    mid = Sequential([LowerBlocks(), UnifyThreadLoops(), CompactBufferAllocation()])(sch.func)
    lp = LocalPadding(explain=True)
    lp(mid)
    return str(lp.report)


def render() -> str:
    sch = loopir.examples.dense(960, 770, 2304)
    off = loopir.lower(sch.func)
    with PassContext(config={"tir.enable_local_pad": True}):
        on = loopir.lower(sch.func)
    return INTRO.format(
        off=off.script().rstrip(), on=on.script().rstrip(),
        report=_report(960, 770, 2304), report100=_report(100, 770, 2304),
    )


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
