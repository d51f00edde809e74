"""The online tuner (issue 11): a guarded, clock-agnostic controller of the scheduler's live knobs.

The controller modules here (``controller`` and its collaborators ``tracking``, ``baseline``,
``trials``, ``chooser``; ``switchback``, ``measure``, ``objective``, ``stats``, ``phase``, ``bandit``, ``local``,
``space``, ``arms``, ``freeze``, ``decisions``, ``snapshot``, ``config``) import only the core, numpy and Optuna: no
daemon, no simulator, no torch, no vLLM (``tests/tuner/test_imports.py``). ``offline/`` (``superinferd tune``) drives
the twin and imports the simulator; ``superinferd bench tuner`` lives in ``superinfer/bench/tuner/``.
docs/tuner.md has the design and the numbers.
"""

from superinfer.tuner.arms import Arm, Arms, ArmsError, load_arms, save_arms
from superinfer.tuner.config import MODES, TunerConfig, TunerConfigError
from superinfer.tuner.controller import Controller
from superinfer.tuner.decisions import Decision
from superinfer.tuner.space import DEFAULT_KNOBS, DEFAULT_STEP_CAPS, KnobSpace, SpaceError

__all__ = ["Arm", "Arms", "ArmsError", "Controller", "DEFAULT_KNOBS", "DEFAULT_STEP_CAPS", "Decision", "KnobSpace",
           "MODES", "SpaceError", "TunerConfig", "TunerConfigError", "load_arms", "save_arms"]
