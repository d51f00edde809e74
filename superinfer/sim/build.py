"""One way to assemble the twin's cost model from its spec (issue 26).

Every twin prices its iterations with a :class:`~superinfer.sim.costmodel.CostModel` (one engine) or a
:class:`~superinfer.sim.parallel.ParallelCostModel` (one engine on a TP x PP layout). They are built here,
and only here, from what a spec names: the model and hardware profiles (names or profiles), the KV block
size, an optional calibration of a measured engine, the GPU cost choice
(:data:`~superinfer.sim.grounded.GPU_COSTS`), whether copies overlap compute, and an optional layout and
fabric. Callers: one twin run from a spec (:func:`superinfer.sim.run.cost_model`), the layout planner
(:func:`superinfer.sim.plan.evaluate`), the tuner's twin (:meth:`superinfer.tuner.offline.evaluate.TwinEnv.cost_model`,
which its replay uses), the daemon's live twin (:class:`superinfer.daemon.backends.sim.SimBackend`) and the
fidelity bench's calibrated twin (:func:`superinfer.bench.fidelity.twin.cost_model`).

Invariants:

* the same arguments give the same prices (the builder adds nothing the cost model does not take);
* ``overlap`` sets both ``overlap`` and ``duplex`` (a transfer engine that does not overlap copies with
  compute does not run the two directions together either); :func:`overlaps` is the policy rule;
* ``gpu_costs="datasheet"`` prices from the datasheet roofline (no fitted terms), the other choices from the
  shipped fitted terms (:func:`~superinfer.sim.grounded.gpu_cost_terms`); a calibration and fitted terms
  exclude each other (the cost model refuses both), and a layout takes no calibration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from superinfer.core.policies import core_policy_name
from superinfer.sim import calibration as calib
from superinfer.sim.costmodel import CostModel
from superinfer.sim.fabric import Fabric, get_fabric
from superinfer.sim.grounded import gpu_cost_terms
from superinfer.sim.hardware import HardwareProfile, get_hardware
from superinfer.sim.models import ModelProfile, get_model
from superinfer.sim.parallel import ParallelCostModel

if TYPE_CHECKING:
    from superinfer.sim.calibration import Calibration
    from superinfer.sim.layout import Layout


def overlaps(policy: str) -> bool:
    """Whether ``policy``'s transfer engine overlaps copies with compute (all but ``lvf-nooverlap``)."""
    return policy != "lvf-nooverlap"


#: whose host work overlaps the GPU's: as vLLM does on a GPU (``auto``: every policy, the plugin's too), the same
#: named outright (``all``), or none (``none``: every engine with ``--no-async-scheduling``)
HOST_OVERLAP = ("auto", "all", "none")


def schedules_async(policy: str, host_overlap: str = "auto") -> bool:
    """Whether ``policy``'s host work overlaps the GPU's. ``auto``: it does, for every policy: vLLM schedules
    asynchronously by default on a GPU, and the plugin follows it (``RotaAsyncScheduler``; an iteration that
    parks still pays its host work after the GPU's, :meth:`CostModel.price_step`); ``none``: no policy does
    (ValueError on an unknown policy or mode)."""
    core_policy_name(policy)  # an unknown policy is an error
    if host_overlap not in HOST_OVERLAP:
        raise ValueError(f"host_overlap: expected one of {', '.join(HOST_OVERLAP)}, got {host_overlap!r}")
    return host_overlap != "none"


def build_cost_model(model: str | ModelProfile, hardware: str | HardwareProfile, block_size: int = 16, *,
                     calibration: Calibration | str | None = None, gpu_costs: str = "datasheet",
                     overlap: bool = True, layout: Layout | None = None,
                     fabric: Fabric | str | None = None, async_host: bool = False) -> CostModel:
    """The twin's cost model (see the module docstring). ``calibration``: a loaded calibration or a path
    to one (empty: none); ``layout``: a :class:`ParallelCostModel` on that layout, connected by ``fabric``
    (a fabric or its name; None: the hardware's plain one); ``async_host``: the grounded costs' host work
    overlaps the GPU's (:func:`schedules_async`; the datasheet roofline's constant overhead is always added)."""
    m = get_model(model) if isinstance(model, str) else model
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    cal = (calib.load(calibration) if calibration else None) if isinstance(calibration, str) else calibration
    terms, cpu_line = gpu_cost_terms(gpu_costs)
    if layout is None:
        return CostModel(m, hw, block_size, cal, overlap=overlap, duplex=overlap, gpu_terms=terms, cpu_line=cpu_line,
                         async_host=async_host)
    if cal is not None:
        raise ValueError("a parallel layout's cost model takes no calibration")
    fab = fabric if isinstance(fabric, Fabric) else get_fabric(hw.name, fabric)
    return ParallelCostModel(m, hw, block_size, layout, fab, overlap=overlap, duplex=overlap, gpu_terms=terms,
                             cpu_line=cpu_line, async_host=async_host)
