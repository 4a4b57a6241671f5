//! Per-session sums for `cachekeeper report` and the dashboard (built in parallel; see
//! `docs/accounting.md`).
