"""KPI formulas and definitions (statistics, strata, Audit Depth, adjudication rules, the report's
HTML): pure, no ledger or file I/O. The report over a window is :mod:`proxy.evaluation.kpi_report`."""
