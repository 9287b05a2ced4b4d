"""PassContext: the typed configuration, optimization level and instruments of a pass run.

Every pass module registers the configuration keys it reads with
[`register_config`][loopir.passes.context.register_config] at import time (key, Python type,
default, one-line doc). A [`PassContext`][loopir.passes.context.PassContext] validates its
``config`` against that registry when it is created, so a typo or a wrongly typed value fails loudly
instead of silently changing nothing. Passes read their settings only through
``PassContext.current().get(key)``: no environment variable or module global decides what a pass
does.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from loopir.errors import PassError

if TYPE_CHECKING:
    from loopir.passes.base import PassInstrument

__all__ = ["ConfigEntry", "PassContext", "register_config"]


@attrs.frozen
class ConfigEntry:
    """A registered configuration key.

    Attributes
    ----------
    key
        Dotted name, e.g. ``"tir.enable_local_pad"``.
    type
        The Python type a value must have (``bool``, ``int``, ``float``, ``str``).
    default
        The value used when a context does not set the key.
    doc
        One-line description shown by
        [`PassContext.list_configs`][loopir.passes.context.PassContext.list_configs].
    """

    key: str
    type: type
    default: Any
    doc: str


_REGISTRY: dict[str, ConfigEntry] = {}
_LOCK = threading.Lock()


def _type_ok(value: Any, expected: type) -> bool:
    # bool is a subclass of int: refuse True for an int key and 1 for a bool key, because
    # either is almost certainly a mistake in a config dict. NumPy scalars of the right kind
    # (np.True_, np.int64(3), np.float32(0.5)) are what they look like: accepted.
    is_bool = isinstance(value, (bool, np.bool_))
    if expected is bool:
        return is_bool
    if expected is int:
        return isinstance(value, (int, np.integer)) and not is_bool
    if expected is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not is_bool
    return isinstance(value, expected)


def _type_name(value: Any) -> str:
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def register_config(key: str, type_: type, default: Any, doc: str) -> ConfigEntry:
    """Register the configuration key ``key`` (called by pass modules at import).

    Registering the same key again with the same type and default is a no-op (modules may be
    reloaded); a conflicting registration raises [`PassError`][loopir.errors.PassError].

    Parameters
    ----------
    key
        Dotted key name.
    type_
        Python type of the values.
    default
        Default value; must have type ``type_``.
    doc
        One-line description.

    Returns
    -------
    ConfigEntry
        The registered entry.
    """
    if not isinstance(key, str) or not key:
        raise PassError(f"register_config: key must be a non-empty string, got {key!r}")
    if not _type_ok(default, type_):
        raise PassError(
            f"register_config: default of {key!r} must be {type_.__name__}, "
            f"got {type(default).__name__} {default!r}"
        )
    entry = ConfigEntry(key, type_, default, doc)
    with _LOCK:
        old = _REGISTRY.get(key)
        if old is not None and (old.type is not type_ or old.default != default):
            raise PassError(
                f"register_config: {key!r} is already registered as {old.type.__name__} "
                f"(default {old.default!r}); cannot re-register as {type_.__name__} "
                f"(default {default!r})"
            )
        _REGISTRY[key] = entry
    return entry


def _check_disabled(names: Iterable[str]) -> frozenset[str]:
    """``names`` as a frozenset, once each is known to be an optional pass."""
    from loopir.passes.base import known_passes

    if isinstance(names, str):
        raise PassError(
            f"PassContext: disabled_passes must be a list of pass names, got the string {names!r}"
        )
    known = known_passes()
    out = []
    for name in names:
        if not isinstance(name, str):
            raise PassError(
                f"PassContext: disabled_passes holds pass names, got {type(name).__name__} {name!r}"
            )
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            optional = sorted(n for n, req in known.items() if not req)
            raise PassError(
                f"PassContext: disabled_passes names unknown pass {name!r}{hint} "
                f"(passes that can be disabled: {', '.join(optional)})"
            )
        if known[name]:
            raise PassError(
                f"PassContext: pass {name!r} cannot be disabled: it is required for correct "
                "lowering (only optional passes, such as Simplify, can be)"
            )
        out.append(name)
    return frozenset(out)


def _ensure_registered() -> None:
    """Import the pass modules so that every built-in key is registered."""
    import loopir.passes  # noqa: F401  (registration happens at import)


_STATE = threading.local()


def _stack() -> list[PassContext]:
    st = getattr(_STATE, "stack", None)
    if st is None:
        st = []
        _STATE.stack = st
    return st


class PassContext:
    """Configuration under which passes run; a context manager.

    Parameters
    ----------
    config
        ``{key: value}`` for registered keys (see
        [`list_configs`][loopir.passes.context.PassContext.list_configs]). Unknown keys and wrongly
        typed values raise [`PassError`][loopir.errors.PassError] naming the key.
    opt_level
        Optimization level (0-3). Passes whose ``opt_level`` exceeds it are skipped, unless
        they are required for correctness.
    instruments
        [`PassInstrument`][loopir.passes.base.PassInstrument] objects called around every pass.
    disabled_passes
        Names of optional passes to skip. Unknown names and required passes (LowerBlocks,
        ThreadSync, ... : needed for correct lowering) raise [`PassError`][loopir.errors.PassError];
        [`loopir.passes.base.known_passes`][loopir.passes.base.known_passes] lists which are which.
        ``disabled_pass=`` (TVM's name) is the same.

    Examples
    --------
    >>> with PassContext(config={"tir.enable_local_pad": True}):
    ...     lowered = loopir.lower(func)

    Contexts nest: the innermost entered context is
    [`current`][loopir.passes.context.PassContext.current]; it does not inherit the outer one's
    config (as in TVM).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        opt_level: int = 2,
        instruments: Sequence[PassInstrument] = (),
        disabled_passes: Iterable[str] = (),
        *,
        disabled_pass: Iterable[str] | None = None,
    ) -> None:
        _ensure_registered()
        if disabled_pass is not None:  # TVM's name
            if disabled_passes:
                raise PassError(
                    "PassContext: give disabled_passes or its TVM name disabled_pass, not both"
                )
            disabled_passes = disabled_pass
        if not _type_ok(opt_level, int) or not 0 <= opt_level <= 3:
            raise PassError(f"PassContext: opt_level must be an int in 0..3, got {opt_level!r}")
        opt_level = int(opt_level)  # NumPy integers too
        if config is not None and not isinstance(config, Mapping):
            raise PassError(
                f"PassContext: config must be a dict of key -> value, got {type(config).__name__}"
            )
        checked: dict[str, Any] = {}
        for key, value in (config or {}).items():
            entry = _REGISTRY.get(key)
            if entry is None:
                close = difflib.get_close_matches(str(key), list(_REGISTRY), n=1, cutoff=0.5)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise PassError(
                    f"PassContext: unknown config key {key!r}{hint} "
                    "(PassContext.list_configs() lists the known keys)"
                )
            if not _type_ok(value, entry.type):
                raise PassError(
                    f"PassContext: config key {key!r} expects {entry.type.__name__}, "
                    f"got {_type_name(value)} {value!r}"
                )
            # Stored as the Python type: passes compare with `is True` and format with %d.
            checked[key] = entry.type(value) if entry.type in (bool, int, float) else value
        from loopir.passes.base import PassInstrument

        for inst in instruments:
            if not isinstance(inst, PassInstrument):
                raise PassError(
                    f"PassContext: instruments must be PassInstrument objects, "
                    f"got {type(inst).__name__}"
                )
        self.config: dict[str, Any] = checked
        self.opt_level = opt_level
        self.instruments: tuple[PassInstrument, ...] = tuple(instruments)
        self.disabled_passes: frozenset[str] = _check_disabled(disabled_passes)

    # --- configuration --------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The value of ``key`` in this context (its registered default when unset).

        Raises
        ------
        PassError
            If ``key`` is not registered.
        """
        entry = _REGISTRY.get(key)
        if entry is None:
            close = difflib.get_close_matches(str(key), list(_REGISTRY), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PassError(f"PassContext.get: unknown config key {key!r}{hint}")
        return self.config.get(key, entry.default)

    @staticmethod
    def list_configs() -> dict[str, ConfigEntry]:
        """All registered keys: ``{key: ConfigEntry(key, type, default, doc)}``, sorted."""
        _ensure_registered()
        return {k: _REGISTRY[k] for k in sorted(_REGISTRY)}

    # --- nesting --------------------------------------------------------------------------
    @staticmethod
    def current() -> PassContext:
        """The innermost entered context, or a default one when none is active."""
        st = _stack()
        return st[-1] if st else PassContext()

    def __enter__(self) -> PassContext:
        _stack().append(self)
        try:
            for inst in self.instruments:
                inst.enter_pass_ctx(self)
        except BaseException:
            # __exit__ does not run when __enter__ raises: leave no context on the stack
            _stack().pop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        st = _stack()
        if not st or st[-1] is not self:
            raise PassError("PassContext: contexts must be exited in the reverse order of entry")
        st.pop()
        for inst in self.instruments:
            inst.exit_pass_ctx(self)

    def __repr__(self) -> str:
        return (
            f"PassContext(config={self.config!r}, opt_level={self.opt_level}, "
            f"instruments={[type(i).__name__ for i in self.instruments]})"
        )
