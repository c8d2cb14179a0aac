-- PTXBench store, schema version 3: every timed judgement's fraction of the speed of light
-- (engine/gpu/sol.py: the floor of the task's work on that device over the measured median),
-- beside its TFLOP/s, for the evaluation's headline size and for each timed size.
ALTER TABLE evaluations ADD COLUMN sol_fraction REAL;
ALTER TABLE measurements ADD COLUMN sol_fraction REAL;
