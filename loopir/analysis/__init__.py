"""Analyses of whole functions that need integer arithmetic (``loopir.arith``): the verifier.

This layer sits above ``arith``, beside ``te``, ``schedule`` and ``passes`` (TVM keeps its
``tir.analysis`` likewise); ``loopir.verify`` is
[`loopir.analysis.verifier.verify`][loopir.analysis.verifier.verify].
"""
