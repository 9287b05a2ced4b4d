"""The recording decorator's declared argument roles (issue 17): declared, not guessed."""

from __future__ import annotations

import pytest

from loopir.schedule.schedule import INSTRUCTION_KINDS, BlockRV, LoopRV, Schedule, instruction
from loopir.schedule.trace import ATTR, HANDLE, HANDLES, VARHANDLES


def test_every_primitive_declares_its_handles() -> None:
    roles = {k: {p.name: (p.role, p.handle_type) for p in s.params if p.role != ATTR}
             for k, s in INSTRUCTION_KINDS.items()}  # fmt: skip
    assert roles["compute_at"] == {"block": (HANDLE, "block"), "loop": (HANDLE, "loop")}
    assert roles["fuse"] == {"loops": (VARHANDLES, "loop")}
    assert roles["cache_read"]["consumer_blocks"] == (HANDLES, "block")
    assert roles["annotate"] == {"block_or_loop": (HANDLE, "any")}
    assert roles["get_block"] == {} and roles["sample_categorical"] == {}


def test_an_undeclared_handle_parameter_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="parameter 'loop' \\(LoopRV\\) takes handles; declare it"):

        @instruction()
        def bad(self: Schedule, loop: LoopRV) -> None:  # noqa: ARG001
            pass


def test_declarations_must_match_the_signature() -> None:
    with pytest.raises(TypeError, match="inputs= names unknown parameters \\['blk'\\]"):
        instruction(inputs={"blk": "block"})(lambda self, block: None)
    with pytest.raises(TypeError, match="unknown input kind 'blok'"):
        instruction(inputs={"block": "blok"})(lambda self, block: None)
    with pytest.raises(TypeError, match="'loops' is declared '\\*loops' but is positional or keyword"):

        @instruction(inputs={"loops": "*loops"})
        def bad2(self: Schedule, loops: list[LoopRV]) -> None:  # noqa: ARG001
            pass

    with pytest.raises(TypeError, match="takes handles; declare it"):

        @instruction()
        def bad3(self: Schedule, *blocks: BlockRV) -> None:  # noqa: ARG001
            pass
