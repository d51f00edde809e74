"""What the controller does with the traffic itself: feature slots into Page-Hinkley, a detected
change (abort the trial, forget the baseline, measure afresh), naming the phase from the arms file and
going to its arm (at once when the study's gain over the incumbent there is at least ``jump_gain``,
else by a trial), and the low-load freeze.

A mixin of :class:`~superinfer.tuner.controller.Controller` (it uses the controller's state and its
``_end_trial``, ``_propose``, ``_log`` and ``_frozen_now``); kept apart so each file has one job.
"""

from __future__ import annotations

import math

from superinfer.tuner.arms import merge_params
from superinfer.tuner.measure import rate_of
from superinfer.tuner.phase import mean_features, nearest_phase


class TrafficTracking:
    def _slots(self, now: float) -> None:
        for f in self.m.closed_slots(now):
            n = f.pop("_arrivals", None)
            if self.m.arrivals_total == 0:
                continue  # nothing has arrived yet: no traffic to learn from (see superinfer.tuner.phase)
            self.recent.append(f)
            alarms = self.ph.update(f, n)
            if alarms:
                self._phase_change(now, alarms)
                continue
            self.phase_slots.append(f)
            if self.pending_classify is not None:
                self.pending_classify -= 1
                if self.pending_classify <= 0:
                    self.pending_classify = None
                    self._classify(now, jump=True)
                    if self.phase is None and self.classify_tries < 4:  # not named yet: try the next slot
                        self.classify_tries += 1
                        self.pending_classify = 1
            elif len(self.phase_slots) % 4 == 0:
                self._classify(now, jump=False)

    def _phase_change(self, now: float, alarms: list[str]) -> None:
        self.epoch += 1
        self.counts["phase_changes"] += 1
        self.phase_slots = []
        self.bandit.reset()
        if self.trial is not None:
            self._end_trial(now, "abort", "traffic changed during the trial", write_back=True, gain=None)
        self.baseline = None
        self.m.close(self.obs)
        self.obs = self.m.open(now, self.cfg.classify_slots * self.cfg.slot_s, "baseline")
        self.pending_classify = self.cfg.classify_slots
        self.classify_tries = 0
        self.phase = None
        self._log(now, "phase", "traffic changed: " + ", ".join(alarms))

    def _classify(self, now: float, jump: bool) -> None:
        feats = mean_features(self.phase_slots[-8:])
        name, d = nearest_phase(feats, self.arms.centroids(), self.cfg.phase_max_distance)
        if name != self.phase:
            self.phase = name
            self._log(now, "phase", f"phase {name or 'unknown'} (distance {d:.2f})")
        if not jump or name is None or self.mode == "off" or self.freeze.reason(now):
            return
        target = self.space.toward(self.incumbent, merge_params(self.incumbent, self.arms.phases[name]),
                                   self.cfg.arm_step_factor)
        if self.space.same(target, self.incumbent):
            return
        arm = self.arms.phases[name]
        here = self.arms.prior(name, self.incumbent, self.space.same)
        gain = None if here is None or arm.score is None else arm.score - here
        full = self.space.same(target, merge_params(self.incumbent, arm))  # not cut short by the step caps
        if gain is not None and full and self.cfg.jump_gain < 1 and gain >= self.cfg.jump_gain:
            self._jump(now, name, target, arm.score, here)
            return
        why = f"jump to the study's arm for phase {name}"
        if gain is not None:
            why += f" (the study's gain {gain:+.3f} over the incumbent here; " + \
                ("below jump_gain)" if full else "more than the step caps allow in one decision)")
        self._propose(now, f"arm:{name}", target, why=why)

    def _load_check(self, now: float) -> None:
        rate = rate_of(list(self.recent))
        low = (not math.isnan(rate)) and len(self.recent) >= min(2, self.recent.maxlen) and \
            rate * self.cfg.window_s < self.cfg.min_requests
        if low != self.freeze.low_load:
            self.freeze.low_load = low
            if low:
                self._log(now, "freeze", f"low_load: {rate:.3g} req/s fills a {self.cfg.window_s:g} s window with "
                          f"fewer than {self.cfg.min_requests} requests")
                self._frozen_now(now)
            else:
                self._log(now, "unfreeze", f"load back: {rate:.3g} req/s")

