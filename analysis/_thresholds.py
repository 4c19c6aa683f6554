"""The classifier's thresholds: one frozen record, checked when made, given to the SQL as named parameters.

Its own module because the classifier (:mod:`._classify`) and the per-trace features (computed with the
default thresholds when spans are written, :mod:`._features_compute`; used at classify time only for the
thresholds they were computed with, :mod:`._features_coverage`) both read it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from tailcut.errors import ConfigError


@dataclass(frozen=True)
class Thresholds:
    """The classifier's thresholds (see the rule table in :mod:`tailcut.analysis._classify`).

    Attributes
    ----------
    loop_min_repeats : int, default 3
        First-attempt calls with the same tool and canonical arguments that make a ``tool_loop``.
    structure_z : float, default 6.0
        Robust z of depth or span count against the reference that makes a ``tool_loop``.
    cost_z : float, default 6.0
        Robust z of total tokens or LLM calls (and of one call's tokens, for the first span) that makes a
        ``cost_blowup``.
    duration_z : float, default 20.0
        Robust z of duration that makes a ``cost_blowup``; far higher than ``cost_z`` because wall-clock
        time has heavy tails that come from the machine (load, pauses), not the agent: on the demo fleet
        a run slowed tenfold by its host reaches z ≈ 12 while its tokens and calls are ordinary.
    min_relative_scale : float, default 0.1
        Floor of a z-score's scale, as a share of the reference median.
    min_baseline : int, default 20
        Reference traces an agent needs before its z-scores are computed.
    score_threshold : float, default 0.5
        An ``outcome_score`` below it is a ``silent_degradation``.
    degraded_finish_reasons : tuple of str
        Finish reasons of a final answer that mean it was cut off or withheld (OpenAI's ``length`` and
        ``content_filter``, Anthropic's ``max_tokens`` and ``refusal``).
    drift_min_attempts : int, default 2
        Identical attempts that must fail identically to signal ``schema_drift``.
    transient_errors : str
        Regular expression (matched against the lower-cased error type and message) of errors that are
        transient, so identical retries of them are not drift: timeouts, rate limits, unavailability.
    trust_recorded_counts : bool, default True
        Skip re-validating LLM spans whose SDK-recorded ``tailcut.schema_violations`` is 0 when every
        schema they showed is the enforced one (the same jsonschema check already ran at record time).
    trust_trace_signals : bool, default True
        Take the traces that may repeat a tool call from ``traces.max_tool_repeat`` (the collector counted
        them from the same spans) instead of grouping every tool call of the data dir; ignored when the
        ``traces`` rows do not account for every kept span (see :func:`._candidates.repeats_trusted`).
    """

    loop_min_repeats: int = 3
    structure_z: float = 6.0
    cost_z: float = 6.0
    duration_z: float = 20.0
    min_relative_scale: float = 0.1
    min_baseline: int = 20
    score_threshold: float = 0.5
    degraded_finish_reasons: tuple[str, ...] = ("length", "content_filter", "max_tokens", "refusal")
    drift_min_attempts: int = 2
    transient_errors: str = (
        r"timeout|timed out|rate.?limit|too many requests|\b429\b|\b503\b|unavailable|temporar|"
        r"connection (reset|refused|aborted)|overloaded"
    )
    trust_recorded_counts: bool = True
    trust_trace_signals: bool = True

    def __post_init__(self) -> None:
        if self.loop_min_repeats < 2:
            raise ConfigError(f"loop_min_repeats must be at least 2, got {self.loop_min_repeats}")
        if self.drift_min_attempts < 2:
            raise ConfigError(f"drift_min_attempts must be at least 2, got {self.drift_min_attempts}")
        if self.min_baseline < 1:
            raise ConfigError(f"min_baseline must be at least 1, got {self.min_baseline}")
        for name in ("structure_z", "cost_z", "duration_z"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.min_relative_scale < 0:
            raise ConfigError(f"min_relative_scale must be ≥ 0, got {self.min_relative_scale}")
        if not 0 <= self.score_threshold <= 1:
            raise ConfigError(f"score_threshold must lie in [0, 1], got {self.score_threshold}")
        try:
            re.compile(self.transient_errors)
        except re.error as exc:
            raise ConfigError(f"transient_errors is not a regular expression: {exc}") from None

    def parameters(self) -> dict[str, Any]:
        """The thresholds as the named parameters of the classifier's SQL."""
        values = asdict(self)
        values["degraded_finish_reasons"] = list(self.degraded_finish_reasons)
        del values["trust_trace_signals"]
        return values
