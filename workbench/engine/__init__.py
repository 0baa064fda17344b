"""The exact core, written once: the layer step every pass runs (`layers`), its hook points
(`hooks`), the batched cells over a shared base (`cells`, `attention`, `steps`) and their answers
(`answers`), the greedy decoder and its stopping rule (`decode`), the decode step captured as a
CUDA graph (`graphs`) and which rows and keys a pass may touch (`masks`). `workbench.repair` is
the layer step over one cache; `workbench.decode` answers through the HF model with the same
decoder (on CUDA it steps through the engine's captured `Decoder`); `workbench.batching` packs
every batched pass, the engine's and the KV prefill's."""
