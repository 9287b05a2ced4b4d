"""The stateful schedule fuzzer (issue 7).

Every step applies one random primitive (valid or invalid arguments) to a schedule of a
random te workload: it must raise ScheduleError leaving the schedule unchanged, or keep the
function valid and computing the same outputs on the CPU executor. Each schedule ends with
trace replay (Python and JSON) and lowering with local padding off and on.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` / ``dev`` run a few dozen short schedules;
``thorough`` runs 2000 schedules of up to 12 steps per invocation. See docs/testing.md.
"""

from __future__ import annotations

from hypothesis import settings

from loopir.testing.strategies import schedule_state_machine

_profile = settings.default
# Long runs get longer schedules; CI keeps them short (each step builds a C library).
_thorough = _profile.max_examples >= 1000
_ci_examples = min(_profile.max_examples, 25)

ScheduleMachine = schedule_state_machine()
ScheduleMachine.TestCase.settings = settings(
    _profile,
    max_examples=_profile.max_examples if _thorough else _ci_examples,
    stateful_step_count=12 if _thorough else 8,
    database=None if _thorough else _profile.database,
)

TestScheduleFuzz = ScheduleMachine.TestCase
