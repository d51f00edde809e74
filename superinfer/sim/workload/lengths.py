"""Synthetic prompt/output length distributions fitted to published statistics.

Each length is log-normal, ``exp(N(μ, σ²))`` rounded to an integer >= 1. Where a median and a mean are
published, ``μ = ln(median)`` and ``σ = sqrt(2·ln(mean/median))`` reproduce both exactly (before clipping).

| name | prompt tokens | output tokens | source |
|---|---|---|---|
| ``chat`` | median 1020, mean 1155 -> μ 6.928, σ 0.499 | median 129, mean 211 -> μ 4.860, σ 0.992 | Azure LLM inference trace 2023, conversation (Patel et al., Splitwise, ISCA 2024; github.com/Azure/AzurePublicDataset, AzureLLMInferenceDataset2023); statistics as in ../shared/data/traces/README.md |
| ``code`` | median 1469, mean 2048 -> μ 7.292, σ 0.815 | median 13, mean 28 -> μ 2.565, σ 1.239 | Azure LLM inference trace 2023, code (same sources) |
| ``sharegpt`` | mean 161.3, σ 1.0 (assumed) | mean 338.0, σ 1.0 (assumed) | vLLM paper (Kwon et al., SOSP 2023, §6.1): ShareGPT mean input 161.31, output 337.99 tokens; no median published |
| ``lmsys`` | mean 69.5, σ 1.0 (assumed) | mean 214.5, σ 1.0 (assumed) | LMSYS-Chat-1M (Zheng et al., ICLR 2024, arXiv:2309.11998, Table 1): 69.5 tokens per prompt, 214.5 per response |
| ``reasoning`` | median 134, mean 1055 -> μ 4.898, σ 2.031 | median 974, mean 1520 -> μ 6.881, σ 0.944 | ServeGen DeepSeek-R1 production traffic (Alibaba, arXiv 2505.09999; ``../shared/data/servegen/``): every client's window PMFs weighted by the window's rate, 1.04 M requests in the day; measured log-std 1.85 (prompts) and 0.91 (outputs), output p99 10,017, max 32,768 |
| ``long-context`` | mean 7590, σ 1.0 (assumed) -> μ 8.435 | mean 182, σ 1.0 (assumed) -> μ 4.704 | Mooncake/Kimi open trace means (kvcache-ai/Mooncake README, "open source trace"; Qin et al., arXiv:2407.00079); σ is our assumption, no median is published |

Only the median and mean are matched; the real conversation prompts have a heavier left tail than this
log-normal (log-std 0.99 in the trace vs 0.50 here). Replay the trace itself when the shape matters.
Outputs are capped at the trace's observed maximum only through ``max_len`` clipping (see
``transform.clip_lengths``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from superinfer.sim.workload.spec import WorkloadError


@dataclass(frozen=True)
class LogNormal:
    mu: float
    sigma: float

    @classmethod
    def from_median_mean(cls, median: float, mean: float) -> "LogNormal":
        if not (0 < median <= mean):
            raise ValueError(f"log-normal fit needs 0 < median <= mean, got median {median}, mean {mean}")
        return cls(math.log(median), math.sqrt(2.0 * math.log(mean / median)))

    @classmethod
    def from_mean_sigma(cls, mean: float, sigma: float) -> "LogNormal":
        return cls(math.log(mean) - sigma * sigma / 2.0, sigma)

    @property
    def median(self) -> float:
        return math.exp(self.mu)

    @property
    def mean(self) -> float:
        return math.exp(self.mu + self.sigma * self.sigma / 2.0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.maximum(1, np.rint(rng.lognormal(self.mu, self.sigma, n))).astype(np.int64)


@dataclass(frozen=True)
class LengthDist:
    name: str
    prompt: LogNormal
    output: LogNormal
    source: str

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.prompt.sample(rng, n), self.output.sample(rng, n)


_AZURE = ("Azure LLM inference trace 2023 (Patel et al., Splitwise, ISCA 2024; "
          "github.com/Azure/AzurePublicDataset AzureLLMInferenceDataset2023)")

LENGTHS: dict[str, LengthDist] = {
    "chat": LengthDist("chat", LogNormal.from_median_mean(1020, 1155), LogNormal.from_median_mean(129, 211),
                       _AZURE + ", conversation: prompt median 1020 / mean 1155, output median 129 / mean 211"),
    "code": LengthDist("code", LogNormal.from_median_mean(1469, 2048), LogNormal.from_median_mean(13, 28),
                       _AZURE + ", code: prompt median 1469 / mean 2048, output median 13 / mean 28"),
    "sharegpt": LengthDist(
        "sharegpt", LogNormal.from_mean_sigma(161.31, 1.0), LogNormal.from_mean_sigma(337.99, 1.0),
        "ShareGPT as in the vLLM paper (Kwon et al., SOSP 2023, §6.1): mean input 161.31, mean output 337.99;"
        " sigma 1.0 assumed"),
    "lmsys": LengthDist(
        "lmsys", LogNormal.from_mean_sigma(69.5, 1.0), LogNormal.from_mean_sigma(214.5, 1.0),
        "LMSYS-Chat-1M (Zheng et al., ICLR 2024, arXiv:2309.11998, Table 1): 69.5 tokens per prompt, 214.5 per"
        " response; sigma 1.0 assumed"),
    "reasoning": LengthDist(
        "reasoning", LogNormal.from_median_mean(134, 1055), LogNormal.from_median_mean(974, 1520),
        "ServeGen DeepSeek-R1 production traffic (Alibaba, arXiv 2505.09999; ../shared/data/servegen/), 48 clients"
        " over a day, each window's PMFs weighted by its rate (1.04 M requests): prompt median 134 / mean 1055,"
        " output median 974 / mean 1520 (p99 10,017)"),
    "long-context": LengthDist(
        "long-context", LogNormal.from_mean_sigma(7590, 1.0), LogNormal.from_mean_sigma(182, 1.0),
        "Mooncake open trace (kvcache-ai/Mooncake README; arXiv:2407.00079): mean input 7590, mean output 182;"
        " sigma 1.0 assumed"),
}


def get_lengths(name: str) -> LengthDist:
    try:
        return LENGTHS[name]
    except KeyError:
        raise WorkloadError(f"unknown synthetic workload {name!r}; valid: {', '.join(sorted(LENGTHS))}") from None
