"""Workloads of the ordered-multicore evaluation (§7): the TPCx-BB streaming queries
(:mod:`.tpcxbb`) and the parametric numpy micro-operators (:mod:`.micro`)."""
