"""``python -m benchmarks``: run every benchmark and write the JSON, the chart and docs/benchmarks.md."""

from benchmarks.run_all import main

main()
