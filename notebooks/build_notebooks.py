"""Write the notebooks of this folder from the cells below (no outputs are committed).

    python notebooks/build_notebooks.py

Edit the cells here, not the .ipynb files. Every notebook reads two environment variables so
the test suite can run it top to bottom on a small setting:
KVWB_MODEL (default smollm2-135m) and KVWB_NOTEBOOK_SMALL=1 (fewer examples, fewer budgets).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).parent

SETUP = """\
import os
import workbench as wb

SMALL = os.environ.get("KVWB_NOTEBOOK_SMALL") == "1"   # the test suite runs a small setting
model = wb.load_model(os.environ.get("KVWB_MODEL", "smollm2-135m"))
model.describe()"""

NOTEBOOKS = {
    "01_quickstart": [
        ("md", "# Quickstart: splice, dense, repair, and what each selector would recompute\n\n"
               "One synthetic two-hop question. The receiver splices the passages' isolated caches "
               "(keys re-rotated by a delta-RoPE), and we compare with the dense prefill of the very "
               "same token ids."),
        ("code", SETUP),
        ("code", 'example = wb.load_example("synthetic#2")\n'
                 'ctx = wb.build_context(model, example)\n'
                 'print(ctx.check_splice())            # layer-0 K/V of the splice equal dense up to RoPE rounding\n'
                 'for p in example.passages: print("-", p)\n'
                 'print("Q:", example.question, "| gold:", example.gold)'),
        ("code", 'print("dense  :", ctx.answer(ctx.dense))\n'
                 'print("spliced:", ctx.answer(ctx.spliced))\n'
                 'fixed = ctx.repair(ctx.reused_positions)   # every reused row: reproduces dense\n'
                 'print("repaired (all rows):", ctx.answer(fixed))'),
        ("md", "## How far the splice drifts, per layer"),
        ("code", 'from workbench import plots\nfrom workbench.kv import relative_error\n'
                 'err = relative_error(ctx.spliced, ctx.dense)\n'
                 'plots.layer_profile({"keys (post-RoPE)": err["k"], "values": err["v"]}, '
                 '"relative L2 of the splice vs dense", "relative L2")'),
        ("md", "## A Diagnosis: every signal, selector and budget"),
        ("code", 'from workbench.diagnosis import DiagnoseConfig, diagnose\n'
                 'config = DiagnoseConfig(selectors=("none", "full", "random", "cacheblend", "densedev", "cadence",\n'
                 '                                   "cadence-grad", "bcr:single", "qattn"),\n'
                 '                        budgets=(0.2,) if SMALL else (0.1, 0.2, 0.3), attribution=not SMALL)\n'
                 'd = diagnose(model, example, config, ctx=ctx)\n'
                 'd.summary()'),
        ("md", "The Diagnosis draws itself: its token strip, the rows each selector picks, the layer x "
               "token heatmaps and the deviation left after each repair (`d.show()` does the same)."),
        ("code", 'd'),
        ("code", 'b = config.budgets[-1]\n'
                 'plots.strip_figure(d, b, signal="cadence", outline="cadence")'),
        ("code", 'plots.layer_signal_figure(d, "grad_sq_v")'),
        ("code", 'plots.residual_figure(d, b)'),
    ],
    "02_selectors_and_budgets": [
        ("md", "# Selectors and budgets over a small data set\n\n"
               "A sweep diagnoses every example into a run folder (resumable); the summary gives "
               "accuracy with Wilson intervals (a coin: bootstrap over examples), flips against dense, "
               "the share of the reuse gap recovered and exact McNemar tests (b/c before p, Holm within "
               "each budget; a coin: the sign-flip test on its mean over draws, no b/c)."),
        ("code", SETUP),
        ("code", 'import tempfile\nfrom pathlib import Path\n'
                 'from workbench.diagnosis import DiagnoseConfig\n'
                 'from workbench.experiments.sweep import SweepConfig, run_sweep\n'
                 'from workbench.experiments.summary import summarize, tokens_to_target\n'
                 'from workbench.runstore import load_sweep\n'
                 'diagnose_config = DiagnoseConfig(\n'
                 '    selectors=("none", "full", "random", "cacheblend", "densedev", "cadence", "bcr:single"),\n'
                 '    budgets=(0.2,) if SMALL else (0.1, 0.2, 0.4), max_new_tokens=8 if SMALL else 24, attribution=False)\n'
                 'config = SweepConfig(dataset="synthetic", n=3 if SMALL else 12, diagnose=diagnose_config)\n'
                 'out = Path(tempfile.mkdtemp()) / "run"\n'
                 'run_sweep(model, config, out)\n'
                 'run = load_sweep(out)\nrun.examples'),
        ("code", 'table = summarize(run)  # compared against cacheblend, the default reference present\n'
                 'table[["selector", "budget", "em", "em_low", "em_high", "flip_rate", "gap_recovered", '
                 '"ref_b", "ref_c", "ref_p_holm"]]'),
        ("code", 'from workbench import plots\nplots.budget_curve(table, "flip_rate", "flip rate against dense")'),
        ("code", 'from workbench.experiments import flips\n'
                 'b = diagnose_config.budgets[-1]\n'
                 'plots.flip_matrix_figure(flips.flip_matrix(run.outcomes, b), f"flips at b = {b}")'),
        ("code", 'flips.rescues(run.outcomes, b)[["selector", "rescued", "broken", "rescued_examples"]]'),
        ("code", 'tokens_to_target(table, run.examples)'),
    ],
    "03_unit_of_choice": [
        ("md", "# The unit of choice (BCR Table 8)\n\n"
               "Restore a budget of a reused segment's rows, grouped into units of 1 to 1024 rows, chosen "
               "by draft attention or by a coin, and measure how far the consuming queries' attention "
               "output stays from dense. The value of choosing falls as the unit grows in the paper; "
               "the curve below is what this model shows."),
        ("code", SETUP),
        ("code", 'import tempfile\nfrom pathlib import Path\n'
                 'from workbench.experiments.unit_curve import run_curve\n'
                 'from workbench.report import curve_summary_markdown\n'
                 'from workbench.runstore import load_curve\n'
                 'settings = dict(tokens=256, prompts=2, units=(1, 16, 64), seeds=2) if SMALL else '
                 'dict(tokens=1024, prompts=4, units=(1, 16, 64, 256), seeds=3)\n'
                 'out = run_curve(model, Path(tempfile.mkdtemp()) / "curve", **settings)\n'
                 'summary = load_curve(out).summary\n'
                 'print(curve_summary_markdown(summary))'),
        ("code", 'from workbench.plots.unit_curve import unit_curve_figure\nunit_curve_figure(summary)'),
        ("md", "Rows of the first passage are exact in the splice (its sender saw the same prefix at the "
               "same positions), so the segment is, by default, the rows computed under a changed prefix "
               "(`pool=\"changed\"`); `pool=\"all\"` adds the exact rows, where a coin wastes budget."),
    ],
    "04_fidelity_consumability": [
        ("md", "# Fidelity vs consumability\n\n"
               "Is a cache that is close to the reader's own in cosine still readable? The probe hands "
               "the reader substitutes for its cache of a fact-bearing passage (calibrated noise, genuine "
               "interpolations, partial layers, retrieval from a bank of genuine keys, projections) and "
               "measures how many questions it still answers, between the floor (fact masked) and the "
               "reference (its own cache). See docs/FIDELITY.md."),
        ("code", SETUP),
        ("code", 'import tempfile\nfrom pathlib import Path\n'
                 'from workbench.experiments.fidelity import run_fidelity\n'
                 'from workbench.runstore import load_fidelity\n'
                 'settings = dict(n=4, cosines=(0.999, 0.95), alphas=(0, 1), layers=(0, 1), bank_ranks=(1,), '
                 'bank_alphas=(1,), bank_size=4, pool_sizes=(1, 2)) if SMALL else dict(n=40)\n'
                 'out = run_fidelity(model, Path(tempfile.mkdtemp()) / "fidelity", **settings)\n'
                 'tables = load_fidelity(out).tables\n'
                 'tables["anchors"]'),
        ("code", 'tables["conditions"].head(20)'),
        ("code", 'from workbench.plots.fidelity import fidelity_figures\n'
                 'figures = fidelity_figures(tables["conditions"])\n'
                 'list(figures)'),
        ("code", 'next(iter(figures.values()))'),
    ],
    "05_nnsight_and_transformerlens": [
        ("md", "# nnsight and TransformerLens on the workbench's caches\n\n"
               "Open an nnsight trace of the question suffix over a repaired cache, and read the same "
               "K/V under TransformerLens hook names."),
        ("code", SETUP),
        ("code", 'from workbench.diagnosis import diagnose\n'
                 'example = wb.load_example("synthetic#0")\n'
                 'd = diagnose(model, example, selectors=("random", "cadence"), budgets=(0.3,), attribution=False)\n'
                 'd.summary()'),
        ("code", 'from workbench import interop\n'
                 'with interop.trace_suffix(d, ("repair", "cadence", 0.3)) as lm:\n'
                 '    h = lm.model.layers[1].output.save()       # hidden states of the suffix\n'
                 '    logits = lm.lm_head.output.save()\n'
                 'print(h.shape, model.tokenizer.decode(logits[0, -1].argmax()))'),
        ("code", 'with interop.trace_suffix(d, "spliced") as lm:\n'
                 '    lm.model.layers[1].mlp.output[:] = 0        # an intervention inside the trace\n'
                 '    patched = lm.lm_head.output.save()\n'
                 'print("next token with layer 1 MLP zeroed:", model.tokenizer.decode(patched[0, -1].argmax()))'),
        ("code", 'names = interop.transformer_lens_names(d.ctx.dense)\n'
                 'print({k: tuple(v.shape) for k, v in list(names.items())[:4]})'),
    ],
    "06_multi_agent_reuse": [
        ("md", "# Multi-agent reuse: KVComm's anchors and gate, its policies, and BCR's repair\n\n"
               "A request runs on a pipeline of agents. Each reads the shared task and the earlier agents' "
               "outputs as segments whose caches a reuse method either predicts from an online pool of "
               "anchors (KVComm) or prefills densely. `docs/PROTOCOLS.md` gives the protocol."),
        ("code", SETUP),
        ("code", 'from workbench.pipeline import PipelineSpec, get_method, run_request\n'
                 'spec = PipelineSpec.fully_connected(3)\n'
                 'print(spec.order, [a.role for a in spec.agents], spec.predecessors(2))'),
        ("md", "One method's state (the anchor pool) carries over from request to request: it learns online."),
        ("code", 'state = get_method("kvcomm-always").make_state()\n'
                 'for example in wb.load_dataset("synthetic", n=2 if SMALL else 6):\n'
                 '    result = run_request(model, spec, example, "kvcomm-always", state)\n'
                 '    print(example.id, [(c.role, c.reused, c.n_anchors) for c in result.calls], "->", result.answer)'),
        ("md", "## A run: every method over the same requests, resumable"),
        ("code", 'import tempfile\nfrom pathlib import Path\n'
                 'from workbench.experiments.pipeline_run import PipelineConfig, run_pipeline\n'
                 'from workbench.experiments.pipeline_summary import summarize_pipeline\n'
                 'from workbench.runstore import load_pipeline\n'
                 'config = PipelineConfig(agents=2, n=2, methods=("token-matched", "kvcomm-always")) if SMALL else \\\n'
                 '    PipelineConfig(agents=3, n=20, methods=("chat-template", "token-matched", "kvcomm", "kvcomm-always", "bcr"))\n'
                 'out = Path(tempfile.mkdtemp()) / "pipeline"\n'
                 'run_pipeline(model, config, out)\n'
                 'run = load_pipeline(out)\n'
                 'tables = summarize_pipeline(run.requests, run.calls)\n'
                 'tables["methods"][["method", "reuse", "acc", "flip_rate", "b_ref", "c_ref", "p_ref", "line_resid"]]'),
        ("code", 'tables["tax"]'),
        ("code", 'from workbench import plots\nplots.reuse_vs_accuracy(tables["methods"])'),
        ("code", 'last = run.calls.query("method == \'kvcomm-always\' and index == @run.calls[\'index\'].max()")\n'
                 'plots.agent_graph(last, list(spec.edges))'),
    ],
    "07_gemma3_sliding_windows": [
        ("md", "# Gemma 3: sliding-window layers and what they do to a splice\n\n"
               "Gemma 3 270M (the second embedded model, under the Gemma Terms of Use) attends within a "
               "512-token window in 15 of its 18 layers and uses a RoPE base per layer type. The splice "
               "re-rotates each layer with its own base; the repair honours each layer's window."),
        ("code", 'import workbench as wb\n'
                 'gemma = wb.load_model("gemma3-270m")\n'
                 'print(gemma.adapter.windows, gemma.adapter.rope_kinds[:6])'),
        ("code", 'from workbench.tasks import Example\n'
                 'filler = " ".join(f"Mira Tessk walked to market number {i} and bought bread." for i in range(45))\n'
                 'example = Example("long", ("Varek Olundi is coached by Mira Tessk.",\n'
                 '                           "Mira Tessk was born in Tressamor. " + filler),\n'
                 '                  "In which city was the coach of Varek Olundi born?", ("Tressamor",))\n'
                 'ctx = wb.build_context(gemma, example)\n'
                 'print(ctx.layout.n_tokens, "tokens;", ctx.check_splice())'),
        ("md", "Below the first global layer, a row more than a window deep into its passage saw the same "
               "tokens spliced or dense: its error there is rounding."),
        ("code", 'seg, window = ctx.layout.passages[1], gemma.adapter.windows[0]\n'
                 'for layer in (1, 2, 6):\n'
                 '    s, d = ctx.spliced.values[layer], ctx.dense.values[layer]\n'
                 '    rel = (s - d).norm(dim=(0, 2)) / d.norm(dim=(0, 2))   # [pos]\n'
                 '    print(layer, "near the start %.2e" % rel[seg.start:seg.start + window - 1].max(),\n'
                 '          "deep %.2e" % rel[seg.start + window - 1:seg.end].max())'),
        ("code", 'from workbench.diagnosis import diagnose\n'
                 'from workbench.plots.diagnosis import layer_type_figure\n'
                 'd = diagnose(gemma, example, selectors=("none", "full", "random", "cadence-grad"), budgets=(0.2,),\n'
                 '             attribution=False, ctx=ctx)\n'
                 'layer_type_figure(d)'),
    ],
    "08_answerable_tasks": [
        ("md", "# Tasks the embedded models can answer: RULER-style needles and chains, real HotpotQA\n\n"
               "Gold-based numbers need a task on which the dense prefill is often right. `ruler:TASK` "
               "generates RULER's needle-in-a-haystack and variable-tracking tasks (Hsieh et al., 2024) at a "
               "length in the model's own tokens, each needle or chain link in a passage of its own, so the "
               "answer needs attention across cached passages; `hotpotqa:PATH` with `passages=\"gold+K\"` "
               "keeps the two gold paragraphs and K drawn distractors. Multi-value and variable-tracking "
               "answers score as *all values present*. docs/PROTOCOLS.md gives the settings."),
        ("code", SETUP),
        ("code", 'from pathlib import Path\n'
                 'TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "variable_tracking")\n'
                 'TOKENS = 384 if SMALL else 2048\n'
                 'fit = dict(tokenizer=model.tokenizer, max_positions=model.max_positions)\n'
                 'root = Path(wb.__file__).resolve().parents[1]\n'
                 'hotpot = root.parent / "shared" / "data" / "hotpotqa_dev_sample.json"\n'
                 'hotpot = hotpot if hotpot.is_file() else root / "tests" / "fixtures" / "hotpotqa_distractors.json"\n'
                 'examples = {f"ruler:{t}": wb.load_example(f"ruler:{t}#3", target_tokens=TOKENS, **fit) for t in TASKS}\n'
                 'first = wb.load_dataset(f"hotpotqa:{hotpot}", n=1)[0].id\n'
                 'examples["hotpotqa gold+2"] = wb.load_example(f"hotpotqa:{hotpot}#{first}", passages="gold+2")\n'
                 'ex = examples["ruler:variable_tracking"]\n'
                 'print(ex.system)\n'
                 'for i, p in enumerate(ex.passages): print(i, "...", [s for s in p.split(". ") if "VAR" in s])\n'
                 'print("Q:", ex.question, "| lead:", ex.meta["answer_lead"], "| gold:", ex.gold, ex.scoring)'),
        ("md", "## One example per task: dense against splice\n\n"
               "Each is diagnosed at b = 0.2 (no repair, a full repair, CacheBlend and the coin); `em` is "
               "exact match, or every value named where the task lists several."),
        ("code", 'import pandas as pd\n'
                 'from workbench.diagnosis import diagnose\n'
                 'diagnoses = {name: diagnose(model, e, selectors=("none", "full", "cacheblend", "random"), budgets=(0.2,),\n'
                 '                            attribution=False, max_new_tokens=16, progress=False)\n'
                 '             for name, e in examples.items()}\n'
                 'pd.DataFrame([{"task": name, "tokens": d.context.n_tokens, "gold": " | ".join(examples[name].gold),\n'
                 '               "dense": d.answers.dense.text, "dense_em": d.answers.dense.em,\n'
                 '               "splice": d.answers.spliced.text, "splice_em": d.answers.spliced.em}\n'
                 '              for name, d in diagnoses.items()])'),
        ("md", "## Where each answer's words come from\n\n"
               "Each word of an answer is traced to the longest verbatim run of answer words it sits in, found "
               "in the gold evidence (the queried needles, the supporting sentences), the prompt, the rest of "
               "the passages that hold evidence, the passages that hold none, or nowhere "
               "(`experiments.answer_sources`; PROTOCOLS, \"Answer sources\"). An answer that reads the "
               "haystack's filler or a distractor's sentence back says what it recites."),
        ("code", 'from workbench.experiments.answer_sources import SOURCES, source_texts, recited_note\n'
                 'rows = []\n'
                 'for name, d in diagnoses.items():\n'
                 '    texts = source_texts(d.example)  # None where the example defines no evidence\n'
                 '    for cache, answer in (("dense", d.answers.dense.text), ("splice", d.answers.spliced.text)):\n'
                 '        shares = texts.sources(answer) if texts is not None else {}\n'
                 '        rows.append({"task": name, "cache": cache, "answer": answer[:48],\n'
                 '                     **{s: shares.get(s) for s in SOURCES}, "recites": recited_note(d.example, answer)})\n'
                 'pd.DataFrame(rows).round(2)'),
        ("md", "The explorer's figures for the variable-tracking example: the token strip coloured by the "
               "splice's deviation, CacheBlend's rows outlined, and what each repair leaves."),
        ("code", 'from workbench import plots\n'
                 'd = diagnoses["ruler:variable_tracking"]\n'
                 'plots.strip_figure(d, 0.2, outline="cacheblend")'),
        ("code", 'plots.residual_figure(d, 0.2)'),
        ("md", "## Accuracy against length (a handful of examples)\n\n"
               "Dense and splice exact match per task and length, on a few examples each: where the dense "
               "answer is right often enough for a gap to exist. The lead's table (n = 30 per cell, both "
               "models) is in docs/RESULTS.md; this cell only shows how it is computed."),
        ("code", 'LENGTHS, N = ((256, 512), 1) if SMALL else ((1024, 2048, 4096), 5)\n'
                 'rows = []\n'
                 'for task in TASKS:\n'
                 '    for tokens in LENGTHS:\n'
                 '        for e in wb.load_dataset(f"ruler:{task}", n=N, target_tokens=tokens, **fit):\n'
                 '            ctx = wb.build_context(model, e)\n'
                 '            rows.append({"task": task, "tokens": tokens,\n'
                 '                         "dense_em": e.score(ctx.answer(ctx.dense, 16))[0],\n'
                 '                         "splice_em": e.score(ctx.answer(ctx.spliced, 16))[0]})\n'
                 'pd.DataFrame(rows).groupby(["task", "tokens"])[["dense_em", "splice_em"]].mean().unstack("tokens")'),
    ],
    "09_patching": [
        ("md", "# Activation patching on a splice: which layers and heads carry dense's answer\n\n"
               "TransformerLens's classic experiment with dense as the clean run and the splice as the "
               "corrupted one. The question runs over the dense cache and over the spliced cache "
               "(`ctx.run_with_cache(over=...)`); then dense's activations are copied into the spliced pass one "
               "at a time: the residual stream (`blocks.L.hook_resid_post`) at one question row, and one "
               "head's output (`blocks.L.attn.hook_z`). The metric is the logit difference of dense's first "
               "answer token against the splice's at the question's last row, normalised: 0 = the splice, "
               "1 = dense. Patches run batched (`workbench.diagnosis.patching`); each patched pass recomputes "
               "the question from its first patched row over the splice."),
        ("code", SETUP),
        ("code", 'example = wb.load_example("synthetic#5")      # SmolLM2: the splice flips dense\'s answer here\n'
                 'ctx = wb.build_context(model, example)\n'
                 'print("Q:", example.question, "| gold:", example.gold)\n'
                 'print("dense :", ctx.answer(ctx.dense, 8))\n'
                 'print("splice:", ctx.answer(ctx.spliced, 8))'),
        ("md", "## The clean and the corrupted run\n\n"
               "Both return the question's logits `[1, question, vocab]` and TransformerLens's `ActivationCache` "
               "of the question's rows; the residual stream of the two runs parts at the last row layer by layer."),
        ("code", 'dense_logits, dense_cache = ctx.run_with_cache(over="dense", names_filter=lambda n: "resid" in n)\n'
                 'splice_logits, splice_cache = ctx.run_with_cache(over="spliced", names_filter=lambda n: "resid" in n)\n'
                 'plus, minus = int(dense_logits[0, -1].argmax()), int(splice_logits[0, -1].argmax())\n'
                 'tok = model.tokenizer.decode\n'
                 'for name, logits in (("dense", dense_logits), ("splice", splice_logits)):\n'
                 '    diff = logits[0, -1, plus] - logits[0, -1, minus]\n'
                 '    print(f"{name:6s} logit({tok([plus])!r}) - logit({tok([minus])!r}) = {diff:.3f}")\n'
                 'd, s = dense_cache.accumulated_resid()[:, 0, -1], splice_cache.accumulated_resid()[:, 0, -1]  # [layer+1, hidden]\n'
                 'print("relative residual gap at the last row, per layer:", ((d - s).norm(dim=-1) / d.norm(dim=-1)).numpy().round(2))'),
        ("md", "## Patching dense into the splice\n\n"
               "The small setting scans the question's last six rows (\" was born in the city of\"); the full "
               "one every row of the question (minutes on a CPU)."),
        ("code", 'from workbench.diagnosis.patching import activation_patching\n'
                 'from workbench.plots.patching import head_patching_figure, resid_patching_figure\n'
                 'question = list(range(ctx.layout.suffix_start, ctx.layout.n_tokens))\n'
                 'rows = question[-6:] if SMALL else question\n'
                 'p = activation_patching(ctx, rows=rows, z_rows=rows)\n'
                 'resid_patching_figure(p)'),
        ("md", "Each head's output patched at the same rows: the few heads that move the answer toward dense "
               "(blue) or away from it (red)."),
        ("code", 'head_patching_figure(p)'),
        ("code", 'import pandas as pd\n'
                 'heads = pd.DataFrame([{"layer": layer, "head": h, "restored": p.z[i, h]}\n'
                 '                      for i, layer in enumerate(p.layers) for h in range(p.z.shape[1])])\n'
                 'heads.reindex(heads["restored"].abs().sort_values(ascending=False).index).head(8)'),
    ],
}


def build() -> list[Path]:
    written = []
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                    for kind, src in cells]
        path = HERE / f"{name}.ipynb"
        nbformat.write(nb, path)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in build():
        print(path)
