"""Twin fidelity: measure a real engine, fit the twin's iteration profile to it, and replay the
twin against it (``inframind twin profile | refit | validate | rescore``; docs/fidelity.md).

One job per module: ``specs`` (the commands' typed options: the grid, a profiling run, a
validation run), ``real`` (open a real engine, its limits, prompts of a given length), ``grid``
(run the profiling grid), ``fit`` (fit the profile to the grid's rows), ``profile`` (the fitted
profile, its entry delay and the profile file), ``calibrate`` (make a profile file: from an
engine or from recorded rows), ``cases`` (the validation cases), ``real_replay`` (replay a case
on the real engine, speed probes), ``twin_replay`` (replay a case on the twin), ``anchor`` (speed
anchoring), ``entry`` (the entry-delay calibration), ``compare`` (score a case), ``plots``,
``report`` (console, tables, a run's files), ``validate`` (one validation run), ``recorded``
(re-score a recorded run), ``cli`` (the typer sub-app ``twin_app``: parse and delegate).
"""
