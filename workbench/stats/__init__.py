"""Paired statistics for comparing two KV-cache repair methods on the same examples.

Every comparison here is *paired*: example ``i`` was answered by method A and by method B,
so the tests work on per-example pairs (or their differences); the one exception,
``difference_of_means``, compares such paired differences between two settings whose examples
are distinct. Which test each function is, and where scipy does the work:

=========================  ==========================================  ===========================
function                   test / quantity                             computed by
=========================  ==========================================  ===========================
``mcnemar_exact``          exact McNemar test (binary outcomes)        ``scipy.stats.binomtest``
``mcnemar_from_counts``    same, from the discordant counts b, c       ``scipy.stats.binomtest``
``wilson_interval``        Wilson score interval for one proportion    ``BinomTestResult.proportion_ci``
``holm``                   Holm-Bonferroni step-down adjustment        here (scipy has no Holm)
``paired_bootstrap_ci``    bootstrap CI of ``stat(a - b)`` over pairs  ``scipy.stats.bootstrap``
``paired_t``               paired (dependent-samples) t-test           ``scipy.stats.ttest_rel``
``sign_flip_test``         paired sign-flip permutation test           exact on a lattice (here), or
                                                                       ``scipy.stats.permutation_test``
``share_of_gap_recovered`` (method - reuse_all) / (dense - reuse_all)  plain arithmetic
``gap_closed_ci``          that share with a paired bootstrap interval  ``scipy.stats.bootstrap``
``cost_to_target_ci``      least cost reaching a share of a reference  here (multinomial resamples)
``difference_of_means``    two independent samples (one setting's      ``scipy.stats.permutation_test``,
                           paired differences against another's):      ``scipy.stats.bootstrap``
                           permutation p, bootstrap interval
=========================  ==========================================  ===========================

Bad input (mismatched lengths, empty arrays, non-boolean outcomes, non-finite scores,
a confidence level outside (0, 1)) raises :class:`~workbench.errors.WorkbenchError`.
"""

from workbench.stats.binary import McNemarResult, holm, mcnemar_exact, mcnemar_from_counts, wilson_interval
from workbench.stats.bootstrap import cost_to_target_ci, gap_closed_ci, paired_bootstrap_ci, share_of_gap_recovered
from workbench.stats.paired import PairedTResult, SignFlipResult, paired_t, sign_flip_test
from workbench.stats.two_sample import TwoSampleResult, difference_of_means

__all__ = ["McNemarResult", "PairedTResult", "SignFlipResult", "TwoSampleResult", "cost_to_target_ci",
           "difference_of_means", "gap_closed_ci", "holm",
           "mcnemar_exact", "mcnemar_from_counts", "paired_bootstrap_ci", "paired_t", "share_of_gap_recovered",
           "sign_flip_test", "wilson_interval"]
