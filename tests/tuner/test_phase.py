"""Page-Hinkley on workload features: a real shift alarms fast, stationary noise does not; phases are
named by the nearest centroid of an arms file."""

from __future__ import annotations

import math
import random

from superinfer.tuner.phase import FeatureSlot, PageHinkley, nearest_phase


def _slot(rng: random.Random, rate: float, prompt: int, voice: float, length: float = 30.0) -> dict:
    s = FeatureSlot(0.0, length)
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= length:
            break
        s.arrival("voice" if rng.random() < voice else "chat", int(prompt * rng.lognormvariate(0, 0.5)))
    return s.features(["chat", "voice"], 8)


def test_a_shift_in_rate_alarms_within_a_few_slots() -> None:
    rng, ph = random.Random(0), PageHinkley()
    assert all(not ph.update(_slot(rng, 6.0, 1000, 0.0)) for _ in range(10))
    alarms = [ph.update(_slot(rng, 2.0, 1000, 0.0)) for _ in range(4)]
    assert any(alarms[:3]) and "log_rate" in next(a for a in alarms if a)


def test_a_shift_in_the_tenant_mix_alarms() -> None:
    rng, ph = random.Random(1), PageHinkley()
    for _ in range(8):
        ph.update(_slot(rng, 6.0, 1000, 0.0))
    alarms = [ph.update(_slot(rng, 6.0, 1000, 0.3)) for _ in range(5)]
    assert any("share:voice" in a for a in alarms)


def test_stationary_noise_rarely_alarms() -> None:
    """Two hours of 30 s slots of the same Poisson traffic (voice 20 %): at most one false alarm."""
    rng, ph = random.Random(2), PageHinkley()
    false = sum(1 for _ in range(240) if ph.update(_slot(rng, 6.0, 1000, 0.2)))
    assert false <= 1


def test_nearest_phase_and_unknown() -> None:
    cents = {"chat": {"log_rate": math.log(6), "log_prompt": 7.0}, "long": {"log_rate": math.log(1), "log_prompt": 9.0}}
    assert nearest_phase({"log_rate": math.log(5.5), "log_prompt": 7.1}, cents, 1.5)[0] == "chat"
    assert nearest_phase({"log_rate": math.log(1.1), "log_prompt": 8.8}, cents, 1.5)[0] == "long"
    assert nearest_phase({"log_rate": math.log(100), "log_prompt": 3.0}, cents, 1.5)[0] is None
