"""The replica layer, written once for both clocks: admission (EDF, bounded queue, infeasible
deadlines shed, ``overloaded``), the load view (snapshots per replica with staleness and
availability) and the choice among a model's replicas."""
