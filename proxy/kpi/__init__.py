"""KPI computations (FAR-A, FAR-H, PFI, TIS) and the strata they are reported by."""
