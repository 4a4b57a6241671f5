//! An exact-prefix prompt-cache model for `cachekeeper replay` (built in parallel; see
//! `docs/accounting.md`).
