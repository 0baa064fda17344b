"""A decode step captured once as a CUDA graph and replayed: greedy decoding without the host's
launch overhead.

A decode step of one row per cell is a few hundred small kernels per layer; on a GPU the host
cannot launch them as fast as the device runs them (the first GPU run measured 34.8 ms a token
for an 8B shape through transformers' eager modules, against about 4 ms to read its weights).
`Decoder` already keeps every cell's rows in preallocated buffers and reads the step's positions
and tokens from tensors, so one step is a fixed sequence of kernels over fixed addresses: it is
recorded once (`torch.cuda.CUDAGraph`) and each later step copies its positions and tokens into
the graph's input buffers and replays it.

    step = StaticStep(decoder, capture=True)     # cuda, no hooks
    logits = step(positions, ids)               # [cell, vocab] float32; every cell, every step

The step never drops a cell (`Decoder.keep` would change the shapes): a cell whose answer has
ended keeps stepping on its last token and its logits are not read. The first call runs eagerly
on a side stream (the warm-up the capture needs, and a real step); the second captures and then
replays. `capture=False` runs the same protocol eagerly (how the tests check it on a CPU). If a
capture fails (a kernel that reads a value back to the host, as a dynamic RoPE does), the step
warns once, decodes eagerly, and no later step in the process tries again.
"""

from __future__ import annotations

import os
import warnings

import torch

from workbench.engine.steps import Decoder

GRAPHS_ENV = "KVWB_CUDA_GRAPHS"  # "0" turns the captured decode off (to time or check against it)
_capture_failed: list[str] = []  # why the first failed capture failed; no later step tries again


def graphs_wanted(model, hooks) -> bool:
    """Whether decode steps on `model` are captured: on CUDA, without hooks (a hook is Python that
    runs at every step), unless KVWB_CUDA_GRAPHS=0 or a capture has failed in this process."""
    return (model.device.type == "cuda" and not hooks and os.environ.get(GRAPHS_ENV, "1") != "0"
            and not _capture_failed)


class StaticStep:
    """One decode step of every cell of `decoder` and the logits after it, at fixed addresses
    (see the module docstring)."""

    def __init__(self, decoder: Decoder, capture: bool):
        n_cells, device = decoder.length.numel(), decoder.length.device
        self.decoder, self.capture, self.device = decoder, capture, device
        self.positions = torch.zeros(n_cells, dtype=torch.long, device=device)  # [cell] the graph's inputs
        self.ids = torch.zeros(n_cells, dtype=torch.long, device=device)  # [cell]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # [cell, vocab] the graph's output
        self.calls = 0
        self.replays = 0

    def _run(self) -> torch.Tensor:
        return self.decoder.model.adapter.logits(self.decoder.step(self.positions, self.ids)).float()

    @torch.inference_mode()
    def __call__(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Step every cell: row at `positions` ([cell]) with token `ids` ([cell]). Returns a copy
        of their logits, [cell, vocab] float32."""
        self.positions.copy_(positions)
        self.ids.copy_(ids)
        self.calls += 1
        if self.capture and self.calls == 1:
            return self._warm_up()
        if self.capture and self.calls == 2:
            self._record()
        if self.graph is None:
            return self._run()
        self.graph.replay()
        self.replays += 1
        return self.logits.clone()

    def _warm_up(self) -> torch.Tensor:
        """The first step, run on a side stream as torch's graph capture asks."""
        with torch.cuda.device(self.device):
            current, side = torch.cuda.current_stream(), torch.cuda.Stream()
            side.wait_stream(current)
            with torch.cuda.stream(side):
                logits = self._run()
            current.wait_stream(side)
            logits.record_stream(current)  # made on the side stream, read on this one
        return logits

    def _record(self) -> None:
        """Capture the step (nothing runs while capturing; the caller replays it at once). The
        capture runs on a stream of its own inside an outer stream context, so that even a capture
        that fails leaves the caller's stream current."""
        if _capture_failed:
            return
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream()
            try:
                with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                    self.logits = self._run()
            except RuntimeError as err:
                _capture_failed.append(str(err).splitlines()[0] if str(err) else type(err).__name__)
                warnings.warn(f"the decode step could not be captured as a CUDA graph; decoding eagerly from now on "
                              f"in this process ({_capture_failed[0]})", RuntimeWarning, stacklevel=3)
                self.logits = None
                return
        self.graph = graph
