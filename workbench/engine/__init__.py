"""The exact core, written once: the layer step every pass runs (`layers`), its hook points
(`hooks`), the batched cells over a shared base (`cells`, `attention`) and their answers
(`answers`), greedy decoding (`decode`: the loop, its stopping rule, the stepper interface, the
decode steps and their CUDA-graph capture, the teacher-forced score) and which rows and keys a
pass may touch (`masks`). `workbench.repair` is the layer step over one cache; `workbench.decode`
answers a cache with the same loop (on CUDA or hooked through the engine's `Decoder`, on the CPU
through HF's steps); `workbench.batching` packs
every batched pass, the engine's and the KV prefill's."""
