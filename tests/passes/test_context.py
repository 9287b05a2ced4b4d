"""PassContext, config registry, Pass/Sequential and instruments."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import loopir
from loopir.errors import PassError
from loopir.ir import Buffer, For, ForKind, PrimFunc, Var
from loopir.ir.stmt import BufferStore
from loopir.passes import (
    FunctionPass,
    LocalPadding,
    Pass,
    PassContext,
    PassInstrument,
    PrintIRInstrument,
    RecordIRInstrument,
    Sequential,
    Simplify,
    register_config,
)


def _func() -> PrimFunc:
    a = Buffer("A", (8,), "float32")
    i = Var("i")
    body = For(i, 0, 8, ForKind.SERIAL, BufferStore(a, a[i] + 1.0, (i * 1 + 0,)))
    return PrimFunc((a,), body)


def test_exported_from_loopir() -> None:
    assert loopir.PassContext is PassContext
    assert callable(loopir.lower)


def test_list_configs_has_typed_documented_keys() -> None:
    cfg = PassContext.list_configs()
    entry = cfg["tir.enable_local_pad"]
    assert entry.type is bool and entry.default is False and entry.doc
    assert list(cfg) == sorted(cfg)
    assert "tir.dump_ir_after" in cfg


def test_unknown_key_suggests_closest() -> None:
    with pytest.raises(PassError, match=r"tir\.enable_local_padd.*did you mean 'tir\.enable_local_pad'"):
        PassContext(config={"tir.enable_local_padd": True})


def test_unknown_key_without_close_match() -> None:
    with pytest.raises(PassError, match="unknown config key 'zzz'") as info:
        PassContext(config={"zzz": 1})
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("value", [1, "yes", None, 1.0])
def test_wrong_type_names_key_expected_and_got(value: object) -> None:
    with pytest.raises(PassError) as info:
        PassContext(config={"tir.enable_local_pad": value})
    msg = str(info.value)
    assert "tir.enable_local_pad" in msg and "bool" in msg and type(value).__name__ in msg


def test_bad_opt_level_and_config_type() -> None:
    with pytest.raises(PassError, match="opt_level"):
        PassContext(opt_level=7)
    with pytest.raises(PassError, match="config must be a dict"):
        PassContext(config=[("tir.enable_local_pad", True)])  # type: ignore[arg-type]


def test_nesting_and_current() -> None:
    default = PassContext.current()
    assert default.get("tir.enable_local_pad") is False
    with PassContext(config={"tir.enable_local_pad": True}) as outer:
        assert PassContext.current() is outer
        assert outer.get("tir.enable_local_pad") is True
        with PassContext(opt_level=0) as inner:
            assert PassContext.current() is inner
            # an inner context does not inherit the outer config (as in TVM)
            assert inner.get("tir.enable_local_pad") is False
        assert PassContext.current() is outer
    assert PassContext.current() is not outer


def test_get_unknown_key() -> None:
    with pytest.raises(PassError, match="unknown config key"):
        PassContext().get("tir.nope")


def test_register_config_conflict_and_bad_default() -> None:
    register_config("test.passes.flag", int, 3, "a test key")
    register_config("test.passes.flag", int, 3, "a test key")  # idempotent
    with pytest.raises(PassError, match="already registered"):
        register_config("test.passes.flag", bool, False, "conflict")
    with pytest.raises(PassError, match="default"):
        register_config("test.passes.other", int, "x", "bad default")
    with PassContext(config={"test.passes.flag": 5}) as ctx:
        assert ctx.get("test.passes.flag") == 5
    with pytest.raises(PassError, match="expects int, got bool"):
        PassContext(config={"test.passes.flag": True})


def test_pass_requires_primfunc() -> None:
    with pytest.raises(PassError, match="Simplify: expected a PrimFunc"):
        Simplify()(42)  # type: ignore[arg-type]


def test_internal_error_becomes_pass_error() -> None:
    def boom(f: PrimFunc, ctx: PassContext) -> PrimFunc:
        raise KeyError("x")

    with pytest.raises(PassError, match="pass Boom failed: KeyError"):
        FunctionPass(boom, "Boom")(_func())


def test_sequential_and_record_instrument() -> None:
    calls: list[str] = []

    def mk(name: str) -> Pass:
        def fn(f: PrimFunc, ctx: PassContext) -> PrimFunc:
            calls.append(name)
            return f

        return FunctionPass(fn, name)

    rec = RecordIRInstrument()
    f = _func()
    with PassContext(instruments=[rec]):
        out = Sequential([mk("a"), mk("b"), Simplify()])(f)
    assert calls == ["a", "b"]
    assert rec.names() == ["a", "b", "Simplify"]
    assert rec.after("Simplify") is out
    with pytest.raises(PassError, match="no pass named 'zz'"):
        rec.after("zz")


def test_opt_level_and_disabled_passes_skip_optional_passes() -> None:
    rec = RecordIRInstrument()
    f = _func()
    with PassContext(opt_level=0, instruments=[rec]):
        assert Simplify()(f) is f
    with PassContext(disabled_passes=["Simplify"], instruments=[rec]):
        assert Simplify()(f) is f
    assert rec.history == []
    with PassContext(instruments=[rec]):
        Simplify()(f)
    assert rec.names() == ["Simplify"]


def test_print_instrument_and_dump_key_log(caplog: pytest.LogCaptureFixture) -> None:
    f = _func()
    caplog.set_level(logging.INFO, logger="loopir.passes.base")
    with PassContext(instruments=[PrintIRInstrument(["Simplify"])]):
        Simplify()(f)
    assert any("IR after Simplify" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with PassContext(config={"tir.dump_ir_after": "*"}):
        loopir.lower(f)
    names = [r.getMessage().splitlines()[0] for r in caplog.records]
    assert "IR after LowerBlocks:" in names and "IR after ThreadSync:" in names


def test_instrument_hooks_called() -> None:
    events: list[str] = []

    class Spy(PassInstrument):
        def enter_pass_ctx(self, ctx: PassContext) -> None:
            events.append("enter")

        def exit_pass_ctx(self, ctx: PassContext) -> None:
            events.append("exit")

        def run_before_pass(self, func: PrimFunc, pass_: Pass) -> None:
            events.append("before " + pass_.name)

        def run_after_pass(self, func: PrimFunc, pass_: Pass) -> None:
            events.append("after " + pass_.name)

    with PassContext(instruments=[Spy()]):
        Simplify()(_func())
    assert events == ["enter", "before Simplify", "after Simplify", "exit"]
    with pytest.raises(PassError, match="PassInstrument"):
        PassContext(instruments=[object()])  # type: ignore[list-item]


def test_lower_pipeline_gated_by_key() -> None:
    rec = RecordIRInstrument()
    with PassContext(instruments=[rec]):
        loopir.lower(_func())
    assert "LocalPadding" not in rec.names()
    rec2 = RecordIRInstrument()
    with PassContext(config={"tir.enable_local_pad": True}, instruments=[rec2]):
        loopir.lower(_func())
    assert rec2.names() == [
        "LowerCrossThreadReduction", "LowerBlocks", "UnifyThreadLoops", "CompactBufferAllocation", "LocalPadding",
        "Simplify", "InjectVirtualThread", "ThreadSync",
    ]  # fmt: skip
    assert repr(LocalPadding(explain=True)) == "LocalPadding(explain=True)"


def test_lower_rejects_non_func() -> None:
    with pytest.raises(PassError, match="lower: expected a PrimFunc"):
        loopir.lower("f")  # type: ignore[arg-type]


def test_disabled_passes_unknown_name_is_an_error() -> None:
    with pytest.raises(PassError, match=r"unknown pass 'Simplfy'; did you mean 'Simplify'\?"):
        PassContext(disabled_passes=["Simplfy"])
    # other tests may register optional passes of their own: match the built-in ones only
    with pytest.raises(PassError, match=r"can be disabled: (.*, )?GemmOffload, (.*, )?Simplify"):
        PassContext(disabled_passes=["NoSuchPass"])
    with pytest.raises(PassError, match="must be a list of pass names, got the string"):
        PassContext(disabled_passes="Simplify")
    with pytest.raises(PassError, match="holds pass names, got int 3"):
        PassContext(disabled_passes=[3])


@pytest.mark.parametrize("name", ["LowerBlocks", "ThreadSync", "UnifyThreadLoops",
                                  "CompactBufferAllocation", "InjectVirtualThread"])
def test_disabled_passes_refuses_required_passes(name: str) -> None:
    # Disabling them used to be accepted and silently ignored.
    with pytest.raises(PassError, match=rf"pass '{name}' cannot be disabled: it is required"):
        PassContext(disabled_passes=[name])


def test_disabled_passes_knows_function_passes() -> None:
    from loopir.passes.base import FunctionPass, known_passes

    p = FunctionPass(lambda f, ctx: f, "MyOptionalPass", required=False)
    assert known_passes()["MyOptionalPass"] is False
    f = _func()
    with PassContext(disabled_passes=["MyOptionalPass"]):
        assert p(f) is f


def test_config_accepts_numpy_scalars_of_the_right_kind() -> None:
    ctx = PassContext(config={"tir.enable_local_pad": np.True_,
                              "cuda.max_shared_memory_per_block": np.int64(4096)})
    assert ctx.get("tir.enable_local_pad") is True
    v = ctx.get("cuda.max_shared_memory_per_block")
    assert v == 4096 and type(v) is int


@pytest.mark.parametrize("key, value, shown", [
    ("cuda.max_shared_memory_per_block", True, "bool True"),
    ("cuda.max_shared_memory_per_block", np.False_, "numpy.bool np.False_"),
    ("tir.enable_local_pad", 1, "int 1"),
    ("tir.enable_local_pad", np.int64(1), "numpy.int64"),
    ("tir.enable_local_pad", "yes", "str 'yes'"),
])  # fmt: skip
def test_config_bool_and_int_keys_are_not_interchangeable(key: str, value: object, shown: str) -> None:
    expected = PassContext.list_configs()[key].type.__name__
    with pytest.raises(PassError, match=rf"config key '{key}' expects {expected}, got {shown}"):
        PassContext(config={key: value})
