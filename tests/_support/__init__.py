"""What the tests share: cases and sweeps per type (scalar_cases, type_cases, lltm_cases,
sparse_cases, fuzz_tensors, override_probe), the checks every operator's samples go
through (op_samples), the registry of operator records that the sweeps over every operator
iterate (op_records), and the scripts run in a separate process
(hostile_calls, hostile_dispatch) with their runner (script_runs). Imported by the test
modules that use them (``from _support.scalar_cases import ...``); conftest imports only
the run's own machinery (tiers: the sampled sweeps; durations: the `slow` marker's list)."""
